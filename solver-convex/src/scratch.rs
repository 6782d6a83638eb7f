//! Vectors of a large program's size, kept per thread between solves.
//!
//! A full-vocabulary solve makes a dozen vectors of 10^5 numbers that live
//! only while it runs (the programs' q and p, starts, marginals, the
//! lumped and bucketed copies of an evaluation). glibc's malloc hands a
//! freed heap top of more than a few MB back to the kernel, so each solve
//! faulted all of them in afresh: about 1500 page faults a solve, 3 µs
//! each on the machine the benchmarks ran on, a fifth of the solve. Kept
//! here instead, they are written again, not faulted in again. Small
//! vectors (below `LARGE` numbers) come from the allocator as usual, whose
//! bins serve them without faults. At most `KEPT` vectors stay on a
//! thread, so that a thread holds at most KEPT times the largest program's
//! size (about 20 MB at V = 151936).
//!
//! Own code: allocation-pool crates (`object-pool`, `lifeguard`) hand out
//! guards of one fixed shape; these vectors change length with every
//! program and move between functions as plain `Vec`s.

use std::cell::RefCell;

/// Vectors shorter than this are not kept.
const LARGE: usize = 8192;
/// Vectors kept per thread.
const KEPT: usize = 16;

thread_local! {
    static FREE: RefCell<Vec<Vec<f64>>> = const { RefCell::new(Vec::new()) };
}

/// An empty vector with room for `capacity` numbers: the smallest kept one
/// that has it, else a new one.
pub(crate) fn take(capacity: usize) -> Vec<f64> {
    if capacity < LARGE {
        return Vec::with_capacity(capacity);
    }
    FREE.with_borrow_mut(|free| {
        let best = (0..free.len())
            .filter(|&i| free[i].capacity() >= capacity)
            .min_by_key(|&i| free[i].capacity());
        best.map_or_else(|| Vec::with_capacity(capacity), |i| free.swap_remove(i))
    })
}

/// `take(len)` filled with `value`.
pub(crate) fn filled(len: usize, value: f64) -> Vec<f64> {
    let mut vector = take(len);
    vector.resize(len, value);
    vector
}

/// Keeps a vector for later `take`s on this thread, dropping the smallest
/// kept one when there are more than `KEPT`.
pub(crate) fn give(mut vector: Vec<f64>) {
    if vector.capacity() < LARGE {
        return;
    }
    vector.clear();
    FREE.with_borrow_mut(|free| {
        free.push(vector);
        if free.len() > KEPT {
            let smallest = (0..free.len())
                .min_by_key(|&i| free[i].capacity())
                .expect("more than KEPT vectors");
            free.swap_remove(smallest);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_vectors_come_back_empty_and_large_enough() {
        FREE.with_borrow_mut(Vec::clear);
        let mut vector = take(2 * LARGE);
        vector.extend((0..2 * LARGE).map(|i| i as f64));
        let address = vector.as_ptr();
        give(vector);
        // A smaller request gets the same memory back, emptied.
        let again = take(LARGE);
        assert_eq!(again.as_ptr(), address);
        assert!(again.is_empty() && again.capacity() >= 2 * LARGE);
        // A larger one gets a new vector.
        give(again);
        assert!(take(4 * LARGE).capacity() >= 4 * LARGE);
        assert_eq!(filled(LARGE, 1.5), vec![1.5; LARGE]);
    }

    #[test]
    fn at_most_kept_vectors_stay() {
        FREE.with_borrow_mut(Vec::clear);
        for i in 0..2 * KEPT {
            give(Vec::with_capacity(LARGE + i));
        }
        FREE.with_borrow(|free| {
            assert_eq!(free.len(), KEPT);
            // The largest stay.
            assert!(free.iter().all(|v| v.capacity() >= LARGE + KEPT));
        });
    }
}
