//! The controller's caches of Node views: the parsed views kept from one look to the next
//! ([`ViewCache`]), and the names of the Nodes a watch changed since ([`NodeChanges`]).
//!
//! Owns which Nodes are parsed again (only those whose resourceVersion changed, or that a
//! watch event named), their stable order, and what a pass reads of them all without looking
//! at each (the notable views, the count per state). It must never write, nor decide anything
//! of a node: the pass reads the views it hands out; parsing a Node is [`crate::node`]'s.

use k8s_openapi::api::core::v1::Node;

use crate::node::{NodeState, NodeView};

/// The Nodes a watch changed since their views were last brought up to date: a look after a
/// few Node events updates those views ([`ViewCache::update`]) instead of every Node's.
#[derive(Default)]
pub struct NodeChanges {
    /// Names of the Nodes added, changed or deleted.
    pub names: std::collections::HashSet<String>,
    /// The watch (re)listed: every Node is to be looked at again ([`ViewCache::refresh`]).
    pub relisted: bool,
}

impl NodeChanges {
    /// Notes what one event of a Node watch changed.
    pub fn note(&mut self, ev: &kube::runtime::watcher::Event<Node>) {
        use kube::runtime::watcher::Event;
        match ev {
            Event::Apply(n) | Event::Delete(n) => {
                self.names
                    .insert(n.metadata.name.clone().unwrap_or_default());
            }
            Event::Init | Event::InitApply(_) | Event::InitDone => self.relisted = true,
        }
    }
}

/// Parsed views of a set of Nodes, kept from one look to the next: a Node is parsed again only
/// when its resourceVersion changed. Parsing every Node at every look cost O(nodes) parses per
/// Node event in a large rollout (issue 14: the controller's pass, the simulator's report loop).
///
/// Beside the views it keeps, up to date with each one parsed, what a pass would otherwise
/// look at every view for: the positions of the views its `notable` test picks (the few a
/// pass must read although they did not change) and how many views are in each state.
#[derive(Default)]
pub struct ViewCache {
    /// Per node name: its position in `views`.
    index: std::collections::HashMap<String, usize>,
    /// The resourceVersion each view was parsed from, by position.
    versions: Vec<String>,
    /// Shared with whoever asked for them; changed in place when nobody holds them any more.
    views: std::sync::Arc<Vec<NodeView>>,
    /// The test that makes a view notable; no view is without one.
    notable_if: Option<Notable>,
    /// The positions of the notable views.
    notable: std::collections::BTreeSet<usize>,
    /// How many views are in each state.
    states: std::collections::HashMap<NodeState, usize>,
}

/// The test of a notable view (see [`ViewCache::with_notable`]).
pub type Notable = Box<dyn Fn(&NodeView) -> bool + Send + Sync>;

/// Keeps a [`ViewCache`]'s notable positions and state counts as the view at `i` changes
/// from `old` (none: new) to `new` (none: gone).
fn track(
    notable: &mut std::collections::BTreeSet<usize>,
    states: &mut std::collections::HashMap<NodeState, usize>,
    notable_if: Option<&Notable>,
    i: usize,
    old: Option<&NodeView>,
    new: Option<&NodeView>,
) {
    if let Some(s) = old.and_then(|v| v.state) {
        if let Some(c) = states.get_mut(&s) {
            *c = c.saturating_sub(1);
        }
    }
    if let Some(s) = new.and_then(|v| v.state) {
        *states.entry(s).or_default() += 1;
    }
    match (new, notable_if) {
        (Some(v), Some(f)) if f(v) => {
            notable.insert(i);
        }
        _ => {
            notable.remove(&i);
        }
    }
}

impl ViewCache {
    /// An empty cache whose notable views are those `f` picks.
    pub fn with_notable(f: impl Fn(&NodeView) -> bool + Send + Sync + 'static) -> ViewCache {
        ViewCache {
            notable_if: Some(Box::new(f)),
            ..ViewCache::default()
        }
    }

    /// The views of `nodes` (the whole set, each Node once), in a stable order: the order in
    /// which each was first seen.
    pub fn refresh<'a>(
        &mut self,
        nodes: impl IntoIterator<Item = &'a Node>,
    ) -> std::sync::Arc<Vec<NodeView>> {
        let out = std::sync::Arc::make_mut(&mut self.views);
        let mut seen = vec![false; out.len()];
        for n in nodes {
            let name = n.metadata.name.as_deref().unwrap_or_default();
            let version = n.metadata.resource_version.as_deref().unwrap_or_default();
            let (notable, states, f) = (&mut self.notable, &mut self.states, &self.notable_if);
            match self.index.get(name) {
                Some(&i) => {
                    if self.versions[i] != version {
                        let new = NodeView::from_node(n);
                        track(notable, states, f.as_ref(), i, Some(&out[i]), Some(&new));
                        out[i] = new;
                        self.versions[i] = version.to_string();
                    }
                    seen[i] = true;
                }
                None => {
                    let new = NodeView::from_node(n);
                    track(notable, states, f.as_ref(), out.len(), None, Some(&new));
                    self.index.insert(name.to_string(), out.len());
                    out.push(new);
                    self.versions.push(version.to_string());
                    seen.push(true);
                }
            }
        }
        if seen.contains(&false) {
            // Nodes gone: keep the others, in order, and index them again.
            self.keep_only(&seen);
        }
        self.views.clone()
    }

    /// Keeps the views flagged in `keep` (one flag per view), in order, and indexes them again.
    fn keep_only(&mut self, keep: &[bool]) {
        let out = std::sync::Arc::make_mut(&mut self.views);
        let mut k = keep.iter();
        out.retain(|_| *k.next().expect("one flag per view"));
        let mut k = keep.iter();
        self.versions
            .retain(|_| *k.next().expect("one flag per view"));
        self.index.clear();
        let index = out.iter().enumerate().map(|(i, v)| (v.name.clone(), i));
        self.index.extend(index);
        // Positions moved: counted again (Nodes are seldom deleted).
        self.notable.clear();
        self.states.clear();
        for (i, v) in out.iter().enumerate() {
            let f = self.notable_if.as_ref();
            track(&mut self.notable, &mut self.states, f, i, None, Some(v));
        }
    }

    /// Whether the views were ever refreshed from a whole set of Nodes: [`ViewCache::update`]
    /// only edits what a [`ViewCache::refresh`] built.
    pub fn primed(&self) -> bool {
        !self.index.is_empty() || !self.versions.is_empty()
    }

    /// Updates the views of the Nodes named in `changed` only, each to its Node as it is now
    /// (`None`: gone), and returns them all. A pass after one Node event costs that Node, not
    /// a look at every Node (issue 14: at 5,000 Nodes the full look was a quarter of the
    /// controller's time per rebooted node). Nothing is copied when nothing changed.
    pub fn update<N: std::ops::Deref<Target = Node>>(
        &mut self,
        changed: impl IntoIterator<Item = (String, Option<N>)>,
    ) -> std::sync::Arc<Vec<NodeView>> {
        let mut sets = Vec::new();
        let mut adds = Vec::new();
        let mut gone = Vec::new();
        for (name, node) in changed {
            match (self.index.get(&name), node) {
                (Some(&i), Some(n)) => {
                    if self.versions[i]
                        != n.metadata.resource_version.as_deref().unwrap_or_default()
                    {
                        sets.push((i, n));
                    }
                }
                (None, Some(n)) => adds.push(n),
                (Some(&i), None) => gone.push(i),
                (None, None) => {}
            }
        }
        if sets.is_empty() && adds.is_empty() && gone.is_empty() {
            return self.views.clone();
        }
        let out = std::sync::Arc::make_mut(&mut self.views);
        let version = |n: &Node| n.metadata.resource_version.clone().unwrap_or_default();
        let (notable, states, f) = (&mut self.notable, &mut self.states, &self.notable_if);
        for (i, n) in sets {
            let new = NodeView::from_node(&n);
            track(notable, states, f.as_ref(), i, Some(&out[i]), Some(&new));
            out[i] = new;
            self.versions[i] = version(&n);
        }
        for n in adds {
            let name = n.metadata.name.clone().unwrap_or_default();
            if self.index.contains_key(&name) {
                continue;
            }
            let new = NodeView::from_node(&n);
            track(notable, states, f.as_ref(), out.len(), None, Some(&new));
            self.index.insert(name, out.len());
            out.push(new);
            self.versions.push(version(&n));
        }
        if !gone.is_empty() {
            let mut keep = vec![true; out.len()];
            for i in gone {
                keep[i] = false;
            }
            self.keep_only(&keep);
        }
        self.views.clone()
    }

    /// The position of the view of the Node `name` in the views as last refreshed or updated.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// Whether a Node of that name is in the set as last refreshed.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The positions of the notable views (those the test given to
    /// [`ViewCache::with_notable`] picks), in the views' order.
    pub fn notable(&self) -> impl Iterator<Item = usize> + '_ {
        self.notable.iter().copied()
    }

    /// How many views are in each state (a state no view is in may count 0 or be absent).
    pub fn state_counts(&self) -> &std::collections::HashMap<NodeState, usize> {
        &self.states
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::fixtures;
    use crate::node::{REBOOT_REQUIRED, STATE};

    #[test]
    fn the_view_cache_parses_a_node_again_only_when_its_version_changed() {
        let mut a = fixtures::node("a", &[]);
        a.metadata.resource_version = Some("1".into());
        let mut b = fixtures::node("b", &[]);
        b.metadata.resource_version = Some("2".into());
        let mut cache = ViewCache::default();
        let first = cache.refresh([&a, &b]);
        assert_eq!(
            first.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(!first[0].flagged());
        // The same version with other content (never so on a server): the cached view stands.
        let same_version = fixtures::annotate(a.clone(), REBOOT_REQUIRED, "2026-01-01T00:00:00Z");
        assert!(!cache.refresh([&same_version, &b])[0].flagged());
        // A new version is parsed, while the view handed out before is left as it was.
        let mut changed = same_version;
        changed.metadata.resource_version = Some("3".into());
        let second = cache.refresh([&b, &changed]);
        assert!(second[0].flagged(), "{:?}", second[0]);
        assert!(!first[0].flagged());
        // A Node gone is dropped; the others keep their order.
        let third = cache.refresh([&b]);
        assert_eq!(
            third.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
            ["b"]
        );
        assert!(cache.contains("b") && !cache.contains("a"));
        let fourth = cache.refresh([&changed, &b]);
        assert_eq!(
            fourth.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
            ["b", "a"]
        );
    }

    #[test]
    fn node_changes_name_the_nodes_an_event_changed_and_a_relist_asks_for_every_node() {
        use kube::runtime::watcher::Event;
        let mut c = NodeChanges::default();
        c.note(&Event::Apply(fixtures::node("a", &[])));
        c.note(&Event::Delete(fixtures::node("b", &[])));
        assert_eq!(c.names.len(), 2);
        assert!(c.names.contains("a") && c.names.contains("b") && !c.relisted);
        c.note(&Event::Init);
        assert!(c.relisted);
    }

    #[test]
    fn an_update_of_the_view_cache_touches_only_the_nodes_named() {
        let versioned = |name: &str, rv: &str| {
            let mut n = fixtures::node(name, &[]);
            n.metadata.resource_version = Some(rv.into());
            n
        };
        let (a, b, c) = (
            versioned("a", "1"),
            versioned("b", "2"),
            versioned("c", "3"),
        );
        let mut cache = ViewCache::default();
        assert!(!cache.primed());
        let first = cache.refresh([&a, &b, &c]);
        assert!(cache.primed());
        let names = |v: &[NodeView]| v.iter().map(|v| v.name.clone()).collect::<Vec<_>>();
        // Nothing changed: the very same views are handed out again.
        let same = cache.update([("b".to_string(), Some(&b))]);
        assert!(std::sync::Arc::ptr_eq(&first, &same));
        // A changed Node is parsed again in its place; the others are left as they were.
        let mut b2 = fixtures::annotate(b.clone(), REBOOT_REQUIRED, "2026-01-01T00:00:00Z");
        b2.metadata.resource_version = Some("4".into());
        let second = cache.update([("b".to_string(), Some(&b2))]);
        assert_eq!(names(&second), ["a", "b", "c"]);
        assert!(second[1].flagged() && !second[0].flagged() && !second[2].flagged());
        assert!(
            !first[1].flagged(),
            "a view handed out before is not changed"
        );
        // A Node gone is dropped and one new is added at the end; positions follow.
        let d = versioned("d", "5");
        let third = cache.update([("a".to_string(), None), ("d".to_string(), Some(&d))]);
        assert_eq!(names(&third), ["b", "c", "d"]);
        for (i, v) in third.iter().enumerate() {
            assert_eq!(cache.position(&v.name), Some(i), "{}", v.name);
        }
        assert_eq!(cache.position("a"), None);
        // A Node named but unknown and gone changes nothing.
        let fourth = cache.update([("x".to_string(), None::<&Node>)]);
        assert!(std::sync::Arc::ptr_eq(&third, &fourth));
        // What the updates built is what a whole refresh of the same Nodes gives.
        assert_eq!(names(&cache.refresh([&b2, &c, &d])), ["b", "c", "d"]);
        assert!(cache.refresh([&b2, &c, &d])[0].flagged());
    }

    #[test]
    fn the_view_cache_keeps_the_notable_views_and_the_state_counts_as_nodes_change() {
        let node = |name: &str, rv: &str, flag: bool, state: Option<&str>| {
            let mut n = fixtures::node(name, &[]);
            if flag {
                n = fixtures::annotate(n, REBOOT_REQUIRED, "2026-01-01T00:00:00Z");
            }
            if let Some(s) = state {
                n = fixtures::annotate(n, STATE, s);
            }
            n.metadata.resource_version = Some(rv.into());
            n
        };
        let mut cache = ViewCache::with_notable(NodeView::flagged);
        let views = cache.refresh([
            &node("a", "1", false, Some("done")),
            &node("b", "2", true, None),
            &node("c", "3", false, Some("done")),
        ]);
        let notable = |cache: &ViewCache, views: &[NodeView]| {
            cache
                .notable()
                .map(|i| views[i].name.clone())
                .collect::<Vec<_>>()
        };
        let count = |cache: &ViewCache, s| cache.state_counts().get(&s).copied().unwrap_or(0);
        assert_eq!(notable(&cache, &views), ["b"]);
        assert_eq!(count(&cache, NodeState::Done), 2);
        // b starts its cycle, a is flagged again, c is deleted: positions move.
        let views = cache.update([
            (
                "b".to_string(),
                Some(&node("b", "4", true, Some("draining"))),
            ),
            ("a".to_string(), Some(&node("a", "5", true, Some("done")))),
            ("c".to_string(), None),
        ]);
        assert_eq!(notable(&cache, &views), ["a", "b"]);
        assert_eq!(count(&cache, NodeState::Done), 1);
        assert_eq!(count(&cache, NodeState::Draining), 1);
        // b ends done and unflagged; a new node d comes flagged.
        let views = cache.update([
            ("b".to_string(), Some(&node("b", "6", false, Some("done")))),
            ("d".to_string(), Some(&node("d", "7", true, None))),
        ]);
        assert_eq!(notable(&cache, &views), ["a", "d"]);
        assert_eq!(count(&cache, NodeState::Done), 2);
        assert_eq!(count(&cache, NodeState::Draining), 0);
        // What the updates kept is what a whole refresh of the same Nodes gives.
        let mut fresh = ViewCache::with_notable(NodeView::flagged);
        let all = [
            node("a", "5", true, Some("done")),
            node("b", "6", false, Some("done")),
            node("d", "7", true, None),
        ];
        let again = fresh.refresh(&all);
        assert_eq!(notable(&fresh, &again), notable(&cache, &views));
        assert_eq!(fresh.state_counts().get(&NodeState::Done), Some(&2));
        // Without a test, nothing is notable; states are still counted.
        let mut plain = ViewCache::default();
        plain.refresh(&all);
        assert_eq!(plain.notable().count(), 0);
        assert_eq!(plain.state_counts().get(&NodeState::Done), Some(&2));
    }
}
