//! A map of a few entries kept as a sorted `Vec`: traced's per-connection
//! and per-request tables (tens of entries). Each `BTreeMap<K, V>` type
//! links its own ~3 KB of node code (insert, rebalancing on removal);
//! this links a binary search and a `Vec` insert or remove.

/// Sorted by key; one entry per key.
pub struct SmallMap<K, V>(Vec<(K, V)>);

impl<K, V> Default for SmallMap<K, V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<K: Ord, V> SmallMap<K, V> {
    pub const fn new() -> Self {
        Self(Vec::new())
    }

    fn find(&self, k: &K) -> Result<usize, usize> {
        self.0.binary_search_by(|e| e.0.cmp(k))
    }

    /// The value that was there before, if any.
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        match self.find(&k) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, v)),
            Err(i) => {
                self.0.insert(i, (k, v));
                None
            }
        }
    }

    pub fn get(&self, k: &K) -> Option<&V> {
        self.find(k).ok().map(|i| &self.0[i].1)
    }

    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.find(k).ok().map(|i| &mut self.0[i].1)
    }

    pub fn contains_key(&self, k: &K) -> bool {
        self.find(k).is_ok()
    }

    pub fn remove(&mut self, k: &K) -> Option<V> {
        self.find(k).ok().map(|i| self.0.remove(i).1)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Keeps the entries `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.0.retain_mut(|(k, v)| keep(k, v));
    }

    /// In key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_as_a_map_in_key_order() {
        let mut m = SmallMap::new();
        assert!(m.is_empty());
        for k in [5u64, 1, 9, 3] {
            assert_eq!(m.insert(k, k * 10), None);
        }
        assert_eq!(m.insert(3, 33), Some(30));
        assert_eq!(m.len(), 4);
        assert_eq!(m.get(&3), Some(&33));
        *m.get_mut(&9).unwrap() += 1;
        assert!(m.contains_key(&1) && !m.contains_key(&2));
        assert_eq!(m.remove(&1), Some(10));
        assert_eq!(m.remove(&1), None);
        let all: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(all, [(3, 33), (5, 50), (9, 91)]);
        m.retain(|k, _| *k != 5);
        assert_eq!(m.iter().map(|(k, _)| *k).collect::<Vec<_>>(), [3, 9]);
    }
}
