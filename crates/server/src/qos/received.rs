//! When the request now being served reached its front end: the start of the latency the
//! client sees, which the latency controller holds to a volume's target.
//!
//! A front end (NBD connection, iSCSI session, the forwarding server) stamps each request as
//! it takes it off the wire and runs the backend call inside [`serve_received`]; the
//! [`super::QosExport`] under it reads the stamp on the same thread, so the figure includes
//! the wait for a worker thread and everything between, without the request's timestamp
//! passing through every layer's signature. The volume's own throttle wait is not part of it:
//! the front end moves the stamp forward by the time it slept for the throttle, and
//! `QosExport` subtracts the time it slept itself (a throttled volume's delay is its limit,
//! not a missed target). Calls made outside a stamped scope (internal copies, tests) are timed
//! from the call itself.

use std::cell::Cell;
use std::time::Instant;

thread_local! {
    static RECEIVED: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Run `call` (a backend call on this thread) as serving a request received at `received`.
pub fn serve_received<T>(received: Instant, call: impl FnOnce() -> T) -> T {
    /// Puts back the outer stamp however `call` ends.
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            RECEIVED.with(|r| r.set(self.0));
        }
    }
    let _restore = Restore(RECEIVED.with(|r| r.replace(Some(received))));
    call()
}

/// When the request this thread serves was received, if a front end said.
pub(super) fn received() -> Option<Instant> {
    RECEIVED.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_stamp_holds_inside_the_scope_only() {
        assert_eq!(received(), None);
        let outer = Instant::now();
        let inner = outer + Duration::from_millis(1);
        serve_received(outer, || {
            assert_eq!(received(), Some(outer));
            serve_received(inner, || assert_eq!(received(), Some(inner)));
            assert_eq!(received(), Some(outer));
        });
        assert_eq!(received(), None);
    }
}
