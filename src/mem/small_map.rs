//! A map of few entries kept as a sorted `Vec`, for the daemons' small
//! tables (connections, requests, sessions, producers, instances: tens of
//! entries). Each `BTreeMap<K, V>` type links its own few KB of node code
//! (insert, rebalancing on removal, iteration); this links a binary search
//! and a `Vec` insert or remove. Not for large or hot maps: an insert or
//! remove moves the entries after it.

use std::borrow::Borrow;

/// Sorted by key; one entry per key.
#[derive(Debug, Clone)]
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

    /// Looked up by anything the key borrows as (`&str` for `String`).
    fn find<Q: Ord + ?Sized>(&self, k: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.0.binary_search_by(|e| e.0.borrow().cmp(k))
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

    /// The value at `k`, made by `make` first if there is none (what
    /// `BTreeMap::entry(k).or_insert_with(make)` does).
    pub fn get_or_insert_with(&mut self, k: K, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(&k) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (k, make()));
                i
            }
        };
        &mut self.0[i].1
    }

    pub fn get<Q: Ord + ?Sized>(&self, k: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.find(k).ok().map(|i| &self.0[i].1)
    }

    pub fn get_mut<Q: Ord + ?Sized>(&mut self, k: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        self.find(k).ok().map(|i| &mut self.0[i].1)
    }

    pub fn contains_key<Q: Ord + ?Sized>(&self, k: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(k).is_ok()
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, k: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
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

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.0.iter_mut().map(|(k, v)| (&*k, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.0.iter().map(|e| &e.0)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|e| &e.1)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.0.iter_mut().map(|e| &mut e.1)
    }
}

/// `map[&k]`, as `BTreeMap`'s: panics on a missing key.
impl<K: Ord + Borrow<Q>, Q: Ord + ?Sized, V> std::ops::Index<&Q> for SmallMap<K, V> {
    type Output = V;

    fn index(&self, k: &Q) -> &V {
        self.get(k).expect("key in SmallMap")
    }
}

/// By value, in key order.
impl<K, V> IntoIterator for SmallMap<K, V> {
    type Item = (K, V);
    type IntoIter = std::vec::IntoIter<(K, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a, K, V> IntoIterator for &'a SmallMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;

    fn into_iter(self) -> Self::IntoIter {
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
        assert_eq!(m.keys().copied().collect::<Vec<_>>(), [3, 9]);
        m.values_mut().for_each(|v| *v += 1);
        m.iter_mut().for_each(|(_, v)| *v += 1);
        assert_eq!(m.values().copied().collect::<Vec<_>>(), [35, 93]);
        *m.get_or_insert_with(4, || 0) += 7;
        *m.get_or_insert_with(4, || 100) += 1;
        assert_eq!(m.get(&4), Some(&8));
    }
}
