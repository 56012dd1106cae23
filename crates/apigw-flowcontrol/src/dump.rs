//! The debug dumps of API Priority and Fairness, as kube-apiserver prints them at
//! `/debug/api_priority_and_fairness/dump_priority_levels`, `dump_queues` and `dump_requests`:
//! comma-separated tables padded as Go's tabwriter pads them, times as Go's RFC 3339.

use super::{classify, FlowControl, Level};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

impl FlowControl {
    /// `/debug/api_priority_and_fairness/dump_priority_levels`: one line per level, by name.
    pub fn dump_priority_levels(&self) -> String {
        let mut rows = vec![vec![
            "PriorityLevelName".to_string(),
            "ActiveQueues".into(),
            "IsIdle".into(),
            "IsQuiescing".into(),
            "WaitingRequests".into(),
            "ExecutingRequests".into(),
            "DispatchedRequests".into(),
            "RejectedRequests".into(),
            "TimedoutRequests".into(),
            "CancelledRequests".into(),
        ]];
        for (name, level) in self.by_name() {
            let s = level.set.snapshot();
            rows.push(vec![
                name.clone(),
                s.active_queues.to_string(),
                (s.waiting == 0 && s.executing == 0).to_string(),
                "false".into(),
                s.waiting.to_string(),
                s.executing.to_string(),
                s.dispatched.to_string(),
                s.rejected.to_string(),
                "0".into(),
                "0".into(),
            ]);
        }
        table(&rows)
    }

    /// `/debug/api_priority_and_fairness/dump_queues`: one line per queue of the queuing levels.
    pub fn dump_queues(&self) -> String {
        let mut rows = vec![vec![
            "PriorityLevelName".to_string(),
            "Index".into(),
            "PendingRequests".into(),
            "ExecutingRequests".into(),
            "SeatsInUse".into(),
            "NextDispatchR".into(),
        ]];
        for (name, level) in self.by_name() {
            let s = level.set.snapshot();
            for (i, (waiting, executing, next)) in s.queues.iter().enumerate() {
                rows.push(vec![
                    name.clone(),
                    i.to_string(),
                    waiting.to_string(),
                    executing.to_string(),
                    executing.to_string(),
                    format!("{next:.8}ss"),
                ]);
            }
        }
        table(&rows)
    }

    /// `/debug/api_priority_and_fairness/dump_requests`: one line per waiting or executing
    /// request, by level; with `details`, who sent it and what it asks.
    pub fn dump_requests(&self, details: bool) -> String {
        let mut header: Vec<String> = [
            "PriorityLevelName",
            "FlowSchemaName",
            "QueueIndex",
            "RequestIndexInQueue",
            // Upstream's spelling.
            "FlowDistingsher",
            "ArriveTime",
            "InitialSeats",
            "FinalSeats",
            "AdditionalLatency",
            "StartTime",
        ]
        .map(String::from)
        .to_vec();
        if details {
            header.extend(
                [
                    "UserName",
                    "Verb",
                    "APIPath",
                    "Namespace",
                    "Name",
                    "APIVersion",
                    "Resource",
                    "SubResource",
                ]
                .map(String::from),
            );
        }
        let mut rows = vec![header];
        for (name, level) in self.by_name() {
            for r in level.set.requests() {
                let t = &r.tag;
                let mut row = vec![
                    name.clone(),
                    self.schemas
                        .get(t.schema)
                        .map_or("", |s| s.config.name.as_str())
                        .to_string(),
                    r.queue.to_string(),
                    r.index.to_string(),
                    classify::distinguisher(t.distinguisher, &t.user, &t.attrs).to_string(),
                    rfc3339(wall(t.arrived)),
                    // InitialSeats: every request apigw admits takes one.
                    "1".into(),
                    "0".into(),
                    "0s".into(),
                    r.started
                        .map_or("0001-01-01T00:00:00Z".into(), |at| rfc3339(wall(at))),
                ];
                if details {
                    let a = &t.attrs;
                    let group_version = match a.group.as_str() {
                        "" => a.version.clone(),
                        g => format!("{g}/{}", a.version),
                    };
                    row.extend([
                        t.user.to_string(),
                        a.verb.clone(),
                        a.path.clone(),
                        a.namespace.clone(),
                        a.name.clone(),
                        group_version,
                        a.resource.clone(),
                        a.subresource.clone(),
                    ]);
                }
                rows.push(row);
            }
        }
        table(&rows)
    }

    /// The levels in force, by name, as the dumps list them.
    fn by_name(&self) -> Vec<(&String, &Arc<Level>)> {
        let mut levels: Vec<_> = self.levels.iter().collect();
        levels.sort_by_key(|(name, _)| *name);
        levels
    }
}

/// Rows as upstream's tabwriter prints them: cells joined by `,` and padded to their column.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.len() + 1)
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if c + 1 == row.len() {
                    cell.clone()
                } else {
                    format!("{:<width$}", format!("{cell},"), width = widths[c] + 1)
                }
            })
            .collect();
        out.push_str(cells.concat().trim_end());
        out.push('\n');
    }
    out
}

/// The wall-clock time of the monotonic `at` (requests keep only the latter: one clock read).
fn wall(at: Instant) -> SystemTime {
    SystemTime::now()
        .checked_sub(at.elapsed())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// `t` in UTC as RFC 3339 with nanoseconds, as Go's `time.RFC3339Nano` prints it.
fn rfc3339(t: SystemTime) -> String {
    let seconds = apigw_core::meta::timestamp(t);
    let nanos = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    match nanos {
        0 => seconds,
        n => format!(
            "{}{}Z",
            seconds.trim_end_matches('Z'),
            format!(".{n:09}").trim_end_matches('0')
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::control;
    use std::time::Duration;

    #[test]
    fn the_dumps_list_every_level_and_queue() {
        let fc = control(600, Duration::from_secs(15));
        let levels = fc.dump_priority_levels();
        assert!(levels.starts_with("PriorityLevelName,"), "{levels}");
        assert_eq!(levels.lines().count(), 9, "{levels}");
        let queues = fc.dump_queues();
        // 64 + 64 + 16 + 128 × 3 queues, and the header.
        assert_eq!(
            queues.lines().count(),
            1 + 64 + 64 + 16 + 128 * 3,
            "{}",
            queues.lines().next().unwrap_or("")
        );
    }
}
