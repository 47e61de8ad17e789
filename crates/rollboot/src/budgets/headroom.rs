//! The budget-aware pick's knowledge of the budgets' headroom, pure: which PodDisruptionBudgets
//! each node's evictable pods fall under, how many disruptions each budget still allows now,
//! and whether a waiting node's drain would be held by one of them once the nodes in flight
//! are counted.
//!
//! Why: with `maxNodes` above 1, nodes taken in order whose pods share a budget stall each
//! other (each drain waits for the sibling's replacement to be Ready) while their slots sit
//! idle. The pick ([`crate::controller::decide`]) passes such a node over for the next one
//! whose budgets have headroom, for at most `concurrency.passOverFor`.
//!
//! Owns [`Headroom`] (what a pass knows: the nodes' budgets and the budgets' headroom now),
//! [`Claims`] (the disruptions the nodes in flight and those picked in this pass still owe each
//! budget) and [`BudgetHold`] (which budget holds a node, in a sentence). Pure: it must never do
//! I/O or read a clock; the pass's reads are [`super::watches::HeadroomReader`]'s, and this
//! module only counts.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

/// For each budget (`namespace/name`) a node's evictable pods fall under, those pods' names.
pub type NodeBudgets = BTreeMap<String, Vec<String>>;

/// A budget as its watch says now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BudgetNow {
    /// `status.disruptionsAllowed`.
    pub allowed: i32,
    /// `status.disruptedPods`: pods whose eviction the budget granted and that are not gone
    /// yet; already counted in `allowed`, so no longer owed by the node they run on.
    pub disrupted: BTreeSet<String>,
}

/// What one pass knows for the budget-aware pick.
#[derive(Clone, Debug, Default)]
pub struct Headroom {
    /// The budgets of the waiting nodes the pick looks at and of the nodes in flight that
    /// still drain (a node absent here is never held: its pods were not read).
    pub nodes: HashMap<String, NodeBudgets>,
    /// Those budgets now, by `namespace/name` (a budget absent here holds nothing).
    pub budgets: HashMap<String, BudgetNow>,
}

/// A budget that holds a waiting node's drain now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetHold {
    /// The budget, `namespace/name`.
    pub budget: String,
    /// Its `disruptionsAllowed` now.
    pub allowed: i32,
    /// The nodes (in flight, or picked before it in the same pass) whose pods under it are
    /// still to go: each owes it a disruption.
    pub taken_by: Vec<String>,
}

impl fmt::Display for BudgetHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.taken_by.is_empty() {
            write!(
                f,
                "budget {} allows {} disruption(s) now",
                self.budget, self.allowed
            )
        } else {
            write!(
                f,
                "budget {} allows {} disruption(s) now, owed to {} in flight",
                self.budget,
                self.allowed,
                self.taken_by.join(", ")
            )
        }
    }
}

/// The disruptions each budget still owes to nodes that drain: per budget, the nodes and how
/// many of their pods under it are yet to be evicted.
#[derive(Clone, Debug, Default)]
pub struct Claims {
    by_budget: HashMap<String, Vec<(String, usize)>>,
}

impl Claims {
    /// What the nodes `draining` (in flight, not yet past their drain) owe: their pods under
    /// each budget, less those the budget already counts as disrupted.
    pub fn in_flight<'a>(
        headroom: &Headroom,
        draining: impl IntoIterator<Item = &'a str>,
    ) -> Claims {
        let mut c = Claims::default();
        for node in draining {
            let Some(budgets) = headroom.nodes.get(node) else {
                continue;
            };
            for (budget, pods) in budgets {
                let disrupted = headroom.budgets.get(budget).map(|b| &b.disrupted);
                let owed = pods
                    .iter()
                    .filter(|p| disrupted.is_none_or(|d| !d.contains(pod_name(p))))
                    .count();
                c.add(budget, node, owed);
            }
        }
        c
    }

    /// A node picked in this pass: each of its pods under a budget will ask it for a
    /// disruption.
    pub fn take(&mut self, node: &str, headroom: &Headroom) {
        if let Some(budgets) = headroom.nodes.get(node) {
            for (budget, pods) in budgets {
                self.add(budget, node, pods.len());
            }
        }
    }

    fn add(&mut self, budget: &str, node: &str, owed: usize) {
        if owed > 0 {
            self.by_budget
                .entry(budget.to_string())
                .or_default()
                .push((node.to_string(), owed));
        }
    }

    /// The first budget (by name) of `node`'s pods with no disruption left for it once these
    /// claims are counted; `None` when its drain can start evicting now (or its pods were not
    /// read). A node with two pods under a budget that allows one is not held: its drain
    /// evicts one now and the other once the first is replaced.
    pub fn held(&self, node: &str, headroom: &Headroom) -> Option<BudgetHold> {
        self.held_keeping(node, headroom, None)
    }

    /// [`Claims::held`], but `recorded` where that budget still holds `node` (the budget its
    /// passed-over record names), though another comes before it by name: the record is
    /// written again only when its budget no longer holds the node. (Issue 26's 200-node
    /// rollout wrote 1,050 records, half of its Node writes, as the first holding budget
    /// changed from pass to pass.)
    pub fn held_keeping(
        &self,
        node: &str,
        headroom: &Headroom,
        recorded: Option<&str>,
    ) -> Option<BudgetHold> {
        let mut first = None;
        for (h, _) in self.holding(node, headroom) {
            if recorded == Some(h.budget.as_str()) {
                return Some(h);
            }
            first.get_or_insert(h);
        }
        first
    }

    /// How long `node`'s drain would wait, in the pick's terms: its pods under budgets that
    /// hold it owed first to other nodes (each must be evicted and replaced before this one's
    /// turn), then its pods under budgets at 0 with no claim (a disruption already granted,
    /// whose replacement is on its way). `(0, 0)` for a node that is not held.
    pub fn hold_weight(&self, node: &str, headroom: &Headroom) -> (usize, usize) {
        let mut w = (0, 0);
        for (h, pods) in self.holding(node, headroom) {
            if h.taken_by.is_empty() {
                w.1 += pods;
            } else {
                w.0 += pods;
            }
        }
        w
    }

    /// Every budget of `node`'s pods with no disruption left for it, by name, with how many
    /// of its pods fall under it.
    fn holding<'a>(
        &'a self,
        node: &str,
        headroom: &'a Headroom,
    ) -> impl Iterator<Item = (BudgetHold, usize)> + 'a {
        let budgets = headroom.nodes.get(node);
        budgets
            .into_iter()
            .flatten()
            .filter_map(move |(budget, pods)| {
                if pods.is_empty() {
                    return None;
                }
                let now = headroom.budgets.get(budget)?;
                let claims = self.by_budget.get(budget).map(Vec::as_slice).unwrap_or(&[]);
                let owed: usize = claims.iter().map(|(_, n)| n).sum();
                (i64::from(now.allowed) - owed as i64 <= 0).then(|| {
                    let held = BudgetHold {
                        budget: budget.clone(),
                        allowed: now.allowed,
                        taken_by: claims.iter().map(|(n, _)| n.clone()).collect(),
                    };
                    (held, pods.len())
                })
            })
    }
}

/// The name part of a pod's `namespace/name` (a budget's `disruptedPods` names its pods
/// without their namespace, which is the budget's).
fn pod_name(p: &str) -> &str {
    p.rsplit_once('/').map_or(p, |(_, n)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node and, per budget, its pods under it.
    type NodeSpec<'a> = (&'a str, &'a [(&'a str, &'a [&'a str])]);

    fn headroom(nodes: &[NodeSpec<'_>], budgets: &[(&str, i32, &[&str])]) -> Headroom {
        Headroom {
            nodes: nodes
                .iter()
                .map(|(n, bs)| {
                    let m = bs
                        .iter()
                        .map(|(b, pods)| {
                            (b.to_string(), pods.iter().map(|p| p.to_string()).collect())
                        })
                        .collect();
                    (n.to_string(), m)
                })
                .collect(),
            budgets: budgets
                .iter()
                .map(|(b, allowed, disrupted)| {
                    (
                        b.to_string(),
                        BudgetNow {
                            allowed: *allowed,
                            disrupted: disrupted.iter().map(|p| p.to_string()).collect(),
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn a_budget_at_zero_holds_and_one_with_room_does_not() {
        let r = headroom(
            &[
                ("a", &[("apps/web", &["apps/web-1"])]),
                ("b", &[("apps/db", &["apps/db-1", "apps/db-2"])]),
            ],
            &[("apps/web", 0, &[]), ("apps/db", 1, &[])],
        );
        let c = Claims::default();
        let held = c.held("a", &r).expect("web is at 0");
        assert_eq!(held.budget, "apps/web");
        assert_eq!(
            held.to_string(),
            "budget apps/web allows 0 disruption(s) now"
        );
        // Two pods under a budget allowing one: the drain can start, one at a time.
        assert_eq!(c.held("b", &r), None);
        // A node whose pods were not read is never held.
        assert_eq!(c.held("unknown", &r), None);
    }

    #[test]
    fn a_node_in_flight_owes_its_pods_until_the_budget_counts_them_disrupted() {
        let r = headroom(
            &[
                ("draining", &[("apps/web", &["apps/web-1", "apps/web-2"])]),
                ("waiting", &[("apps/web", &["apps/web-3"])]),
            ],
            &[("apps/web", 2, &[])],
        );
        let c = Claims::in_flight(&r, ["draining"]);
        let held = c.held("waiting", &r).expect("both disruptions are owed");
        assert_eq!(held.taken_by, ["draining"]);
        assert!(held.to_string().contains("owed to draining in flight"));
        // One of them evicted: the budget counts it (allowed is what is left), the node owes
        // the other only.
        let r = headroom(
            &[
                ("draining", &[("apps/web", &["apps/web-1", "apps/web-2"])]),
                ("waiting", &[("apps/web", &["apps/web-3"])]),
            ],
            &[("apps/web", 2, &["web-1"])],
        );
        assert_eq!(
            Claims::in_flight(&r, ["draining"]).held("waiting", &r),
            None
        );
    }

    #[test]
    fn the_recorded_budget_is_kept_while_it_holds_the_node() {
        let r = headroom(
            &[(
                "waiting",
                &[
                    ("ns/a", &["ns/a-1"]),
                    ("ns/b", &["ns/b-1"]),
                    ("ns/c", &["ns/c-1"]),
                ],
            )],
            &[("ns/a", 0, &[]), ("ns/b", 0, &[]), ("ns/c", 1, &[])],
        );
        let c = Claims::default();
        let budget = |recorded| c.held_keeping("waiting", &r, recorded).map(|h| h.budget);
        // Two budgets hold it: the first by name, unless the record names the other.
        assert_eq!(budget(None).as_deref(), Some("ns/a"));
        assert_eq!(budget(Some("ns/b")).as_deref(), Some("ns/b"));
        // A recorded budget with room again, or not one of its pods' budgets: the first.
        assert_eq!(budget(Some("ns/c")).as_deref(), Some("ns/a"));
        assert_eq!(budget(Some("ns/gone")).as_deref(), Some("ns/a"));
        // Not held at all: nothing to record, whatever the record says.
        let free = headroom(
            &[("waiting", &[("ns/a", &["ns/a-1"])])],
            &[("ns/a", 1, &[])],
        );
        assert_eq!(c.held_keeping("waiting", &free, Some("ns/a")), None);
    }

    #[test]
    fn a_node_picked_in_the_pass_claims_its_budgets_for_the_next() {
        let r = headroom(
            &[
                ("a", &[("ns/p", &["ns/x"])]),
                ("b", &[("ns/p", &["ns/y"])]),
                ("c", &[("ns/q", &["ns/z"])]),
            ],
            &[("ns/p", 1, &[]), ("ns/q", 1, &[])],
        );
        let mut c = Claims::default();
        assert_eq!(c.held("a", &r), None);
        c.take("a", &r);
        assert_eq!(c.held("b", &r).map(|h| h.taken_by), Some(vec!["a".into()]));
        assert_eq!(c.held("c", &r), None);
    }
}
