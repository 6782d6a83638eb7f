//! Ctrl-C in long calls. Python runs a signal's handler (raising
//! `KeyboardInterrupt`) only on its main thread, and only when asked: a
//! run in Rust is watched from the calling thread, which asks every
//! `SIGNAL_POLL` with the GIL released, and told through
//! [`Progress::stop_requested`] to stop at its next chunk; the
//! handler's exception is then raised as itself.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use mdsd::core::Progress;
use pyo3::prelude::*;

use crate::errors::{MdsdError, PANICKED};

/// How often a watching thread asks Python for signals: well inside the
/// second within which a Ctrl-C must stop a run.
const SIGNAL_POLL: Duration = Duration::from_millis(20);

/// Runs of fewer f64 entries than this run on the calling thread,
/// unwatched: they end sooner than a watching thread would start.
pub(crate) const WATCHED_ENTRIES: usize = 1 << 18;

/// A run's stop flag, set when the watching thread learns of a signal.
struct Watched(AtomicBool);

impl Progress for Watched {
    fn stop_requested(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn may_stop(&self) -> bool {
        true
    }
}

/// `work` on a thread of its own while this one, the GIL released, waits
/// and asks Python for signals; whatever a signal's handler raises
/// (`KeyboardInterrupt`) stops the work at its next chunk and is raised
/// here. With fewer than [`WATCHED_ENTRIES`] `entries` it runs here, with
/// the GIL released. A refusal or a panic is an `MdsdError`.
pub(crate) fn interruptible<T: Send>(
    py: Python<'_>,
    entries: usize,
    work: impl FnOnce(&dyn Progress) -> Result<T, String> + Send,
) -> PyResult<T> {
    let watched = Watched(AtomicBool::new(false));
    let outcome = |result: std::thread::Result<Result<T, String>>| {
        result
            .map_err(|_| MdsdError::new_err(PANICKED))?
            .map_err(MdsdError::new_err)
    };
    if entries < WATCHED_ENTRIES {
        return outcome(py.detach(|| catch_unwind(AssertUnwindSafe(|| work(&watched)))));
    }
    std::thread::scope(|scope| {
        let (finished, done) = mpsc::channel::<()>();
        let watched = &watched;
        let worker = scope.spawn(move || {
            let result = catch_unwind(AssertUnwindSafe(|| work(watched)));
            let _ = finished.send(());
            result
        });
        let mut done = done;
        loop {
            let (receiver, waited) = py.detach(move || {
                let waited = done.recv_timeout(SIGNAL_POLL);
                (done, waited)
            });
            done = receiver;
            if waited != Err(RecvTimeoutError::Timeout) {
                break;
            }
            if let Err(signal) = py.check_signals() {
                watched.0.store(true, Ordering::Relaxed);
                let _ = py.detach(move || worker.join());
                return Err(signal);
            }
        }
        outcome(py.detach(move || worker.join()).and_then(|result| result))
    })
}

/// Signals asked for on the calling thread, for runs that call back into
/// Python there (a live model's functions): between chunks the run asks,
/// and the handler's exception waits here to be raised.
pub(crate) struct OnThisThread {
    raised: Mutex<Option<PyErr>>,
}

impl OnThisThread {
    pub(crate) fn new() -> Self {
        Self {
            raised: Mutex::new(None),
        }
    }

    /// What a signal's handler raised, if one did.
    pub(crate) fn take(&self) -> Option<PyErr> {
        self.raised.lock().ok()?.take()
    }
}

impl Progress for OnThisThread {
    fn stop_requested(&self) -> bool {
        let Err(signal) = Python::attach(|py| py.check_signals()) else {
            return false;
        };
        if let Ok(mut raised) = self.raised.lock() {
            raised.get_or_insert(signal);
        }
        true
    }

    fn may_stop(&self) -> bool {
        true
    }
}
