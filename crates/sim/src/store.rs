//! The simulator's object store: one typed collection per resource kind, sharing one
//! resourceVersion counter as etcd does. Every write bumps the counter, is kept in a bounded
//! change log (so watches can resume from a resourceVersion until it is compacted away) and is
//! broadcast to live watchers. The store knows nothing about HTTP or controllers.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::broadcast;

/// A stored object's identity: namespace ("" for cluster-scoped kinds) and name. Ordered so that
/// lists are stable and `continue` tokens can resume after a key.
pub type ObjKey = (String, String);

/// What any kind stored in the simulator must be.
pub trait SimObject:
    k8s_openapi::Resource
    + k8s_openapi::Metadata<Ty = ObjectMeta>
    + Clone
    + PartialEq
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> SimObject for K where
    K: k8s_openapi::Resource
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + Clone
        + PartialEq
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

pub fn key_of<K: SimObject>(obj: &K) -> ObjKey {
    let m = obj.metadata();
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

impl ChangeType {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One committed write. `prev` is the object before the write, so a filtered watch can tell an
/// object entering or leaving its selector.
pub struct Change<K> {
    pub rv: u64,
    pub change: ChangeType,
    pub obj: Arc<K>,
    pub prev: Option<Arc<K>>,
}

/// The shared resourceVersion counter.
#[derive(Clone, Default)]
pub struct Revision(Arc<AtomicU64>);

impl Revision {
    pub fn current(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// Why a watch could not start at the requested resourceVersion.
#[derive(Debug)]
pub struct Expired {
    pub requested: u64,
    pub oldest: u64,
}

/// Names a secondary index of a collection (see [`Collection::add_index`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexId(usize);

/// A secondary index: the keys of the objects for which `of` answers a value, grouped by that
/// value and kept in key order, updated on every write. When `field` names the field selector
/// the value is, lists and watches selecting `field=value` read the index instead of scanning.
struct Index<K> {
    of: for<'a> fn(&'a K) -> Option<&'a str>,
    field: Option<&'static str>,
    by: HashMap<String, BTreeSet<ObjKey>>,
    /// The resourceVersion of the last write to an object held, or once held, under a value.
    written: HashMap<String, u64>,
}

impl<K> Index<K> {
    fn touch(&mut self, obj: &K, rv: u64) {
        if let Some(v) = (self.of)(obj) {
            match self.written.get_mut(v) {
                Some(w) => *w = rv,
                None => {
                    self.written.insert(v.to_string(), rv);
                }
            }
        }
    }

    fn insert(&mut self, obj: &K, key: &ObjKey) {
        if let Some(v) = (self.of)(obj) {
            self.by
                .entry(v.to_string())
                .or_default()
                .insert(key.clone());
        }
    }

    fn remove(&mut self, obj: &K, key: &ObjKey) {
        if let Some(v) = (self.of)(obj)
            && let Some(keys) = self.by.get_mut(v)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.by.remove(v);
            }
        }
    }
}

pub struct Collection<K> {
    items: BTreeMap<ObjKey, Arc<K>>,
    indexes: Vec<Index<K>>,
    /// The resourceVersion of the last write in each namespace ("" for cluster-scoped kinds),
    /// so that controllers can skip namespaces nothing was written to since they last looked.
    written: HashMap<String, u64>,
    log: VecDeque<Arc<Change<K>>>,
    log_cap: usize,
    /// Highest resourceVersion dropped from the log: watches from below it get 410.
    compacted_through: u64,
    rev: Revision,
    tx: broadcast::Sender<Arc<Change<K>>>,
}

/// Capacity of each kind's live broadcast channel; a watcher that falls this far behind is
/// ended with 410, like a real apiserver's slow watcher.
const BROADCAST_CAPACITY: usize = 16 * 1024;

impl<K: SimObject> Collection<K> {
    pub fn new(rev: Revision, log_cap: usize) -> Self {
        let (tx, _) = broadcast::channel(BROADCAST_CAPACITY);
        Collection {
            items: BTreeMap::new(),
            indexes: Vec::new(),
            written: HashMap::new(),
            log: VecDeque::new(),
            log_cap: log_cap.max(1),
            compacted_through: 0,
            rev,
            tx,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn get(&self, ns: &str, name: &str) -> Option<&Arc<K>> {
        self.items.get(&(ns.to_string(), name.to_string()))
    }

    /// Adds a secondary index on the value `of` answers (objects answering `None` are left
    /// out); `field` names the field selector that value is, if any.
    pub fn add_index(
        &mut self,
        of: for<'a> fn(&'a K) -> Option<&'a str>,
        field: Option<&'static str>,
    ) -> IndexId {
        let mut index = Index {
            of,
            field,
            by: HashMap::new(),
            written: HashMap::new(),
        };
        for (key, obj) in &self.items {
            index.insert(obj, key);
        }
        self.indexes.push(index);
        IndexId(self.indexes.len() - 1)
    }

    /// The objects an index holds under `value`, in key order.
    pub fn indexed<'a>(
        &'a self,
        id: IndexId,
        value: &str,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Arc<K>)> + use<'a, K> {
        self.indexes[id.0]
            .by
            .get(value)
            .into_iter()
            .flatten()
            .filter_map(|k| self.items.get_key_value(k))
    }

    /// How many objects an index holds under `value`.
    pub fn index_len(&self, id: IndexId, value: &str) -> usize {
        self.indexes[id.0].by.get(value).map_or(0, BTreeSet::len)
    }

    /// The resourceVersion of the last write to an object the index holds, or held, under
    /// `value`, if there was one since the index was added.
    pub fn index_written(&self, id: IndexId, value: &str) -> Option<u64> {
        self.indexes[id.0].written.get(value).copied()
    }

    /// The values an index holds objects under, in no particular order.
    pub fn index_values(&self, id: IndexId) -> impl Iterator<Item = &str> {
        self.indexes[id.0].by.keys().map(String::as_str)
    }

    /// The index answering field selector `field`, if the collection keeps one.
    pub fn index_for_field(&self, field: &str) -> Option<IndexId> {
        self.indexes
            .iter()
            .position(|i| i.field == Some(field))
            .map(IndexId)
    }

    /// Whether anything in namespace `ns` was written (created, changed, deleted) after
    /// resourceVersion `rv`.
    pub fn written_since(&self, ns: &str, rv: u64) -> bool {
        self.written.get(ns).is_some_and(|w| *w > rv)
    }

    /// Whether anything at all was written after resourceVersion `rv`.
    pub fn any_written_since(&self, rv: u64) -> bool {
        self.written.values().any(|w| *w > rv)
    }

    pub fn get_key(&self, key: &ObjKey) -> Option<&Arc<K>> {
        self.items.get(key)
    }

    pub fn values(&self) -> impl Iterator<Item = &Arc<K>> {
        self.items.values()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ObjKey, &Arc<K>)> {
        self.items.iter()
    }

    /// Objects of one namespace (or all, with `None`) whose key sorts after `after`.
    pub fn range<'a>(
        &'a self,
        ns: Option<&str>,
        after: Option<&ObjKey>,
    ) -> Box<dyn Iterator<Item = (&'a ObjKey, &'a Arc<K>)> + 'a> {
        use std::ops::Bound;
        let start = match (after, ns) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let it = self.items.range((start, Bound::Unbounded));
        match ns {
            Some(ns) => {
                let ns = ns.to_string();
                Box::new(it.take_while(move |(k, _)| k.0 == ns))
            }
            None => Box::new(it),
        }
    }

    pub fn revision(&self) -> &Revision {
        &self.rev
    }

    pub fn compacted_through(&self) -> u64 {
        self.compacted_through
    }

    /// Drop the whole change log: every watch resuming from an older version now gets 410.
    pub fn compact_all(&mut self) {
        self.compacted_through = self.rev.current();
        self.log.clear();
    }

    fn commit(&mut self, change: ChangeType, obj: Arc<K>, prev: Option<Arc<K>>, rv: u64) {
        let ns = obj.metadata().namespace.as_deref().unwrap_or("");
        match self.written.get_mut(ns) {
            Some(w) => *w = rv,
            None => {
                self.written.insert(ns.to_string(), rv);
            }
        }
        let c = Arc::new(Change {
            rv,
            change,
            obj,
            prev,
        });
        if self.log.len() >= self.log_cap
            && let Some(old) = self.log.pop_front()
        {
            self.compacted_through = old.rv;
        }
        self.log.push_back(c.clone());
        // No receivers is fine: nobody is watching this kind right now.
        let _ = self.tx.send(c);
    }

    /// Store an object (create or replace), stamping a new resourceVersion. Returns the stored
    /// object, its managedFields trees replaced by placeholders ([`crate::managed_fields`]):
    /// write it out with `managed_fields::write_json` or `to_value`.
    pub fn put(&mut self, mut obj: K) -> Arc<K> {
        let rv = self.rev.next();
        obj.metadata_mut().resource_version = Some(rv.to_string());
        crate::managed_fields::compact(obj.metadata_mut());
        let key = key_of(&obj);
        let obj = Arc::new(obj);
        let old = self.items.get(&key);
        for index in &mut self.indexes {
            if let Some(o) = old {
                index.touch(o, rv);
            }
            index.touch(&obj, rv);
            let before = old.and_then(|o| (index.of)(o));
            if before != (index.of)(&obj) {
                if let Some(o) = old {
                    index.remove(o, &key);
                }
                index.insert(&obj, &key);
            }
        }
        let prev = self.items.insert(key, obj.clone());
        let change = if prev.is_some() {
            ChangeType::Modified
        } else {
            ChangeType::Added
        };
        self.commit(change, obj.clone(), prev, rv);
        obj
    }

    /// Applies `change` to a copy of `obj` and stores it only if it differs: controllers call
    /// this every step, and an unchanged object must keep its resourceVersion.
    pub fn modify(&mut self, obj: &Arc<K>, change: impl FnOnce(&mut K)) -> Arc<K> {
        let mut new = (**obj).clone();
        change(&mut new);
        if new == **obj {
            obj.clone()
        } else {
            self.put(new)
        }
    }

    /// Remove an object. The DELETED event carries the object with the deletion's version.
    pub fn remove(&mut self, ns: &str, name: &str) -> Option<Arc<K>> {
        let key = (ns.to_string(), name.to_string());
        let prev = self.items.remove(&key)?;
        let rv = self.rev.next();
        for index in &mut self.indexes {
            index.remove(&prev, &key);
            index.touch(&prev, rv);
        }
        let mut last = (*prev).clone();
        last.metadata_mut().resource_version = Some(rv.to_string());
        let last = Arc::new(last);
        self.commit(ChangeType::Deleted, last.clone(), Some(prev), rv);
        Some(last)
    }

    /// Changes after `from_rv` still in the log, plus a receiver for everything after them.
    /// Taken under the same lock as writes, so nothing falls between the two.
    #[allow(clippy::type_complexity)]
    pub fn subscribe(
        &self,
        from_rv: u64,
    ) -> Result<(Vec<Arc<Change<K>>>, broadcast::Receiver<Arc<Change<K>>>), Expired> {
        if from_rv < self.compacted_through {
            return Err(Expired {
                requested: from_rv,
                oldest: self.compacted_through,
            });
        }
        let backlog = self
            .log
            .iter()
            .filter(|c| c.rv > from_rv)
            .cloned()
            .collect();
        Ok((backlog, self.tx.subscribe()))
    }

    /// The changes after `from_rv`, oldest first, for a controller that reacts to each object
    /// written; `Expired` if the log no longer reaches back that far.
    pub fn changes_since(
        &self,
        from_rv: u64,
    ) -> Result<impl Iterator<Item = &Arc<Change<K>>>, Expired> {
        if from_rv < self.compacted_through {
            return Err(Expired {
                requested: from_rv,
                oldest: self.compacted_through,
            });
        }
        let first = self.log.partition_point(|c| c.rv <= from_rv);
        Ok(self.log.range(first..))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(ns: &str, name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn versions_are_shared_and_increase() {
        let rev = Revision::default();
        let mut a: Collection<ConfigMap> = Collection::new(rev.clone(), 10);
        let mut b: Collection<ConfigMap> = Collection::new(rev.clone(), 10);
        let x = a.put(cm("ns", "x"));
        let y = b.put(cm("ns", "y"));
        assert_eq!(x.metadata.resource_version.as_deref(), Some("1"));
        assert_eq!(y.metadata.resource_version.as_deref(), Some("2"));
        let gone = a.remove("ns", "x").unwrap();
        assert_eq!(gone.metadata.resource_version.as_deref(), Some("3"));
        assert!(a.remove("ns", "x").is_none());
    }

    #[test]
    fn subscribe_replays_after_version_and_expires_when_compacted() {
        let mut c: Collection<ConfigMap> = Collection::new(Revision::default(), 2);
        c.put(cm("ns", "a")); // rv 1
        c.put(cm("ns", "b")); // rv 2
        c.put(cm("ns", "c")); // rv 3, drops rv 1 from the log
        let (backlog, _) = c.subscribe(1).unwrap();
        assert_eq!(backlog.iter().map(|c| c.rv).collect::<Vec<_>>(), vec![2, 3]);
        let err = c.subscribe(0).err().expect("expired");
        assert_eq!((err.requested, err.oldest), (0, 1));
        c.compact_all();
        assert!(c.subscribe(2).is_err());
        assert!(c.subscribe(3).is_ok());
    }

    #[test]
    fn changes_since_gives_the_later_writes_in_order_until_the_log_is_trimmed() {
        let mut c: Collection<ConfigMap> = Collection::new(Revision::default(), 3);
        c.put(cm("ns", "a")); // rv 1
        c.put(cm("ns", "b")); // rv 2
        c.remove("ns", "a"); // rv 3
        let later: Vec<(u64, ChangeType)> = c
            .changes_since(1)
            .unwrap()
            .map(|ch| (ch.rv, ch.change))
            .collect();
        assert_eq!(
            later,
            vec![(2, ChangeType::Added), (3, ChangeType::Deleted)]
        );
        assert_eq!(c.changes_since(3).unwrap().count(), 0);
        c.put(cm("ns", "c")); // rv 4, drops rv 1 from the log
        assert!(c.changes_since(0).is_err());
        assert_eq!(c.changes_since(1).unwrap().count(), 3);
    }

    #[test]
    fn modify_writes_only_real_changes() {
        let mut c: Collection<ConfigMap> = Collection::new(Revision::default(), 10);
        let a = c.put(cm("ns", "a"));
        let same = c.modify(&a, |_| {});
        assert_eq!(same.metadata.resource_version.as_deref(), Some("1"));
        let changed = c.modify(&a, |o| {
            o.data = Some([("k".to_string(), "v".to_string())].into())
        });
        assert_eq!(changed.metadata.resource_version.as_deref(), Some("2"));
    }

    fn data_key(cm: &ConfigMap) -> Option<&str> {
        cm.data.as_ref()?.get("k").map(String::as_str)
    }

    #[test]
    fn indexes_follow_writes_and_record_namespaces_written() {
        let mut c: Collection<ConfigMap> = Collection::new(Revision::default(), 10);
        c.put(cm("ns", "before"));
        let id = c.add_index(data_key, Some("data.k"));
        assert_eq!(c.index_for_field("data.k"), Some(id));
        let with = |ns: &str, name: &str, v: &str| {
            let mut o = cm(ns, name);
            o.data = Some([("k".to_string(), v.to_string())].into());
            o
        };
        c.put(with("ns", "b", "x"));
        c.put(with("ns", "a", "x"));
        c.put(with("other", "c", "y"));
        let names = |c: &Collection<ConfigMap>, v: &str| -> Vec<String> {
            c.indexed(id, v).map(|(k, _)| k.1.clone()).collect()
        };
        assert_eq!(names(&c, "x"), vec!["a", "b"]);
        c.put(with("ns", "a", "y"));
        assert_eq!(names(&c, "x"), vec!["b"]);
        // Key order: namespace, then name.
        assert_eq!(names(&c, "y"), vec!["a", "c"]);
        c.remove("ns", "b");
        assert!(names(&c, "x").is_empty());
        assert_eq!(c.index_values(id).count(), 1);
        let rv = c.revision().current();
        assert!(!c.written_since("ns", rv) && c.written_since("ns", rv - 1));
        assert!(!c.written_since("other", rv) && !c.any_written_since(rv));
        c.put(cm("other", "d"));
        assert!(c.written_since("other", rv) && c.any_written_since(rv));
    }

    #[test]
    fn range_stays_in_namespace_and_resumes_after_key() {
        let mut c: Collection<ConfigMap> = Collection::new(Revision::default(), 10);
        for (ns, n) in [("a", "1"), ("b", "1"), ("b", "2"), ("c", "1")] {
            c.put(cm(ns, n));
        }
        let names: Vec<_> = c.range(Some("b"), None).map(|(k, _)| k.1.clone()).collect();
        assert_eq!(names, vec!["1", "2"]);
        let after = ("b".to_string(), "1".to_string());
        let rest: Vec<_> = c
            .range(None, Some(&after))
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(
            rest,
            vec![("b".into(), "2".into()), ("c".into(), "1".into())]
        );
    }
}
