//! A client command whose reader goes away ends quietly, as `ls | head` does.
//!
//! Rust ignores SIGPIPE, so `println!` to a closed pipe panics ("failed printing to stdout:
//! Broken pipe") with a backtrace: `weft volume info pg | head -3` printed one. The commands
//! that only print take the default action back (the process ends on the signal, exit 141 to
//! a shell). The daemons and `weft bench` keep ignoring it: their sockets see EPIPE as an error
//! to handle, never a reason to die.

/// Let SIGPIPE end the process, as it ends any Unix filter whose reader closed the pipe.
pub fn end_on_closed_stdout() {
    // SAFETY: signal(2) with SIG_DFL installs no handler (no code runs in signal context);
    // called before this process starts any thread that writes to a pipe or socket.
    #[allow(unsafe_code)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
