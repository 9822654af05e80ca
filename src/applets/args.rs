//! argh glue shared by the applets: `--help` goes to stdout with status 0,
//! bad flags to stderr with status 1.

/// Parses `args` (after the applet name) into `T`, or returns the exit
/// status the applet should end with.
pub fn parse_args<T: argh::FromArgs>(name: &str, args: &[String]) -> Result<T, i32> {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    T::from_args(&[name], &refs).map_err(|early| {
        if early.status.is_ok() {
            print!("{}", early.output);
            0
        } else {
            eprint!("{}", early.output);
            1
        }
    })
}
