//! The guest's one source of randomness, and its clone-hygiene hook. Restored clones of a checkpoint start
//! with identical memory, so identical generator state: SIGUSR1 reseeds the generator from the kernel
//! (getrandom(2), which the kernel itself reseeds after a restore) and the new state's fingerprint is
//! logged and served at GET /drums/rng, so a test can show that two clones now differ.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Mutex;

pub struct GuestRng {
    inner: Mutex<State>,
}

struct State {
    rng: StdRng,
    fingerprint: String,
    generation: u64,
}

fn kernel_seed() -> [u8; 32] {
    let mut seed = [0u8; 32];
    drums::state::fill_random(&mut seed);
    seed
}

/// A one-way digest of the seed (a ChaCha stream keyed by it, in another domain than the generator's):
/// equal states give equal fingerprints, and the fingerprint reveals nothing the generator will produce.
fn fingerprint(seed: &[u8; 32]) -> String {
    let mut key = *seed;
    for b in key.iter_mut() {
        *b ^= 0x5c;
    }
    let mut r = StdRng::from_seed(key);
    format!("{:016x}{:016x}", r.next_u64(), r.next_u64())
}

impl GuestRng {
    pub fn from_kernel() -> GuestRng {
        let seed = kernel_seed();
        GuestRng { inner: Mutex::new(State { rng: StdRng::from_seed(seed), fingerprint: fingerprint(&seed), generation: 0 }) }
    }

    /// Replace the state with a fresh one from the kernel; returns (generation, fingerprint).
    pub fn reseed(&self) -> (u64, String) {
        let seed = kernel_seed();
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        s.rng = StdRng::from_seed(seed);
        s.fingerprint = fingerprint(&seed);
        s.generation += 1;
        (s.generation, s.fingerprint.clone())
    }

    pub fn status(&self) -> (u64, String) {
        let s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        (s.generation, s.fingerprint.clone())
    }

    /// `n` random bytes as lowercase hex (temporary file names).
    pub fn hex(&self, n: usize) -> String {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut buf = vec![0u8; n];
        s.rng.fill_bytes(&mut buf);
        buf.iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reseed_changes_the_fingerprint_and_counts() {
        let r = GuestRng::from_kernel();
        let (g0, f0) = r.status();
        let (g1, f1) = r.reseed();
        assert_eq!((g0, g1), (0, 1));
        assert_ne!(f0, f1);
        assert_eq!(f1.len(), 32);
        assert_eq!(r.status().1, f1, "drawing does not change the fingerprint of the seed");
        assert_eq!(fingerprint(&[7; 32]), fingerprint(&[7; 32]), "equal states, equal fingerprints");
        assert_eq!(r.hex(16).len(), 32);
    }
}
