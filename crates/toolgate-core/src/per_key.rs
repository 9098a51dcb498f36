//! [`PerKey`]: how many of something each key holds now (a tenant's runs or calls in
//! flight, a principal's open streams, a tenant's verification), counted against a cap.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::Hash;

/// Counts per key, each kept only while above zero: keys that hold nothing take no
/// memory, however many have come and gone. The owner keeps it behind its own lock and
/// releases what it took when the holder's guard drops.
#[derive(Debug)]
pub struct PerKey<K>(HashMap<K, usize>);

impl<K> Default for PerKey<K> {
    fn default() -> Self {
        Self(HashMap::new())
    }
}

impl<K: Hash + Eq> PerKey<K> {
    /// How many `key` holds now.
    pub fn get(&self, key: &K) -> usize {
        self.0.get(key).copied().unwrap_or(0)
    }

    /// How many all keys hold together.
    pub fn total(&self) -> usize {
        self.0.values().sum()
    }

    /// One more for `key`, whatever it holds already.
    pub fn add(&mut self, key: K) {
        *self.0.entry(key).or_default() += 1;
    }

    /// One more for `key` if it holds fewer than `cap`; otherwise what it holds.
    pub fn try_add(&mut self, key: K, cap: usize) -> Result<(), usize> {
        match self.0.entry(key) {
            Entry::Occupied(held) if *held.get() >= cap => Err(*held.get()),
            Entry::Occupied(mut held) => {
                *held.get_mut() += 1;
                Ok(())
            }
            Entry::Vacant(_) if cap == 0 => Err(0),
            Entry::Vacant(none) => {
                none.insert(1);
                Ok(())
            }
        }
    }

    /// One fewer for `key`; forgotten at zero.
    pub fn release(&mut self, key: &K) {
        if let Some(count) = self.0.get_mut(key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.0.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PerKey;

    #[test]
    fn counts_up_to_a_cap_and_forgets_a_key_at_zero() {
        let mut held = PerKey::default();
        assert_eq!(held.try_add("a", 2), Ok(()));
        assert_eq!(held.try_add("a", 2), Ok(()));
        assert_eq!(held.try_add("a", 2), Err(2));
        held.add("a");
        assert_eq!((held.get(&"a"), held.total()), (3, 3));
        assert_eq!(held.try_add("b", 1), Ok(()));
        assert_eq!(held.total(), 4);
        for _ in 0..3 {
            held.release(&"a");
        }
        held.release(&"a");
        assert_eq!((held.get(&"a"), held.total()), (0, 1));
        assert!(
            !held.0.contains_key("a"),
            "a key holding nothing is forgotten"
        );
        assert_eq!(held.try_add("b", 1), Err(1));
        assert_eq!(held.try_add("c", 0), Err(0));
        assert!(!held.0.contains_key("c"), "a refused key is not kept");
    }
}
