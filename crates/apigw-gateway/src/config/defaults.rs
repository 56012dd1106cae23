//! The `[default: …]` of each flag's help, read from the settings each section falls back to
//! (each section's `defaults()`, beside its `Default`), so each default is declared once and
//! the help cannot drift from what the gateway does. A default that depends on the machine
//! (the worker threads) or is a behaviour rather than a value (the system roots) is said in the
//! flag's own help instead.

use clap::Command;

/// `cmd` (serve, or check and doctor, which take serve's flags) with each flag's default at
/// the end of its help, as clap writes its own.
pub fn in_help(cmd: Command) -> Command {
    super::flags::defaults()
        .into_iter()
        .fold(cmd, |cmd, (id, default)| {
            cmd.mut_arg(id, |arg| {
                let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                arg.help(format!("{help} [default: {default}]"))
            })
        })
}
