//! [`Progress`]: what a long run tells its caller and asks of it. A run
//! splits its work into chunks; after each it reports the units done, and
//! before each it asks whether the caller wants it stopped (a Ctrl-C in
//! Python, where the interpreter only learns of the signal when asked), in
//! which case it returns [`CoreError::Stopped`](crate::CoreError::Stopped).

/// A long run's caller: told the size of the run and each chunk done, and
/// asked between chunks whether to stop. Every method may be called from
/// any thread of the pool. A closure `Fn(u64)` is a `Progress` that counts
/// and never stops; `&|_| {}` is the quiet one.
pub trait Progress: Sync {
    /// The run has `total` units of work (draws, rows, blocks).
    fn start(&self, _total: u64) {}

    /// `done` more units are done.
    fn advance(&self, _done: u64) {}

    /// Whether the caller asks the run to stop; a run asks before each
    /// chunk, so it stops within one chunk's time.
    fn stop_requested(&self) -> bool {
        false
    }

    /// Whether the caller may ask the run to stop at all: a run whose
    /// chunks trade speed for a prompt stop (smaller batches) makes them
    /// small only then.
    fn may_stop(&self) -> bool {
        false
    }

    /// [`CoreError::Stopped`](crate::CoreError::Stopped) when the caller
    /// asks the run to stop, for `?` between chunks.
    fn check_stop(&self) -> Result<(), crate::CoreError> {
        match self.stop_requested() {
            true => Err(crate::CoreError::Stopped),
            false => Ok(()),
        }
    }
}

impl<F: Fn(u64) + Sync> Progress for F {
    fn advance(&self, done: u64) {
        self(done);
    }
}
