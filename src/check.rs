//! `apigw check`: loads the configuration, the files it names, and every APIService manifest,
//! and prints each problem with its file and field. Nothing is served.

use crate::config::{Config, Flags};
use crate::registry::{load_dir, Registry};
use std::process::ExitCode;

/// Prints every problem found and returns the exit code (1 if any).
pub fn check(flags: &Flags) -> ExitCode {
    let cfg = match Config::load(flags) {
        Ok(cfg) => cfg,
        Err(problems) => {
            for p in &problems {
                println!("error: {p}");
            }
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    if let Err(e) = crate::gateway::Gateway::build(&cfg, Registry::new()) {
        println!("error: {e:#}");
        failed = true;
    }
    match &cfg.apiservice_dir {
        Some(dir) => match load_dir(dir) {
            Ok(services) => {
                for s in &services {
                    let target = s.service.as_ref().map_or("Local".to_string(), |svc| {
                        format!("{}:{}", svc.host(), svc.port)
                    });
                    println!("ok: APIService {} -> {target}", s.name);
                }
            }
            Err(problems) => {
                for p in &problems {
                    println!("error: {p}");
                }
                failed = true;
            }
        },
        None => println!("note: no --apiservice-dir; the registry is empty"),
    }
    if failed {
        ExitCode::FAILURE
    } else {
        println!("configuration ok");
        ExitCode::SUCCESS
    }
}
