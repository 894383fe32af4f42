//! One node's drain, from the taint to an empty node: the task ([`task`]) records the start,
//! cordons, makes room first with `--surge`, then passes over the node's pods until none is
//! left, and records how it ended. What the drains publish for the loop over nodes (what they
//! still need from the budgets, what they evicted) lives here too, so the fleet imports the
//! drain and never the other way round.
//!
//! Decides (pure, no I/O): [`pods`] (what to do with each pod), [`node_plan`] (a node's plan
//! from its pods and the budgets: what to evict now, which budget each eviction charges),
//! [`budgets`] (which budgets never allow one, and their pace), [`pace`] (how fast each budget
//! gives disruptions back), [`eviction`] (the eviction queue: evict, wait, back off or force),
//! [`restart`] (when a one-replica Deployment is restarted rather than its pod evicted),
//! [`rules`] (what DrainRules say about each pod), [`surge`] (which pods need room, and each
//! placeholder), [`replace_by`] (the replace-by
//! deadline), [`watched`] (the node's pods as the watch shows them).
//!
//! Does (I/O): [`task`] (the drain task and its passes), [`eviction_io`] (the Eviction API;
//! [`budget_turns`] keeps one eviction per budget on the wire), [`restart_io`] (the rollout
//! restart's reads and patch), [`surge_io`] (placeholder pods), [`placeholders_io`] (the watch
//! of every placeholder: which are pending, which the scheduler preempted), [`rules_io`] (the
//! DrainRule and namespace watches), [`watched_io`] (a node's pod watch), [`node_pods_io`] (the
//! one watch a drain reads its node's pods from, for the surge step and the evictions) and
//! [`kept_watches_io`] (the pod watches the choice opens to weigh candidates, kept for their
//! drains).

pub mod answers;
pub mod budget_turns;
pub mod budgets;
pub mod budgets_io;
pub mod eviction;
pub mod eviction_io;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod kept_watches_io;
pub mod node_plan;
pub mod node_pods_io;
pub mod outcome;
pub mod pace;
pub mod pass;
pub mod pass_io;
pub mod placeholders_io;
pub mod pods;
pub mod published;
pub mod replace_by;
pub mod restart;
pub mod restart_io;
pub mod rules;
pub mod rules_io;
pub mod shared;
pub mod surge;
pub mod surge_io;
pub mod task;
pub mod watched;
pub mod watched_io;

/// Locks `m`, taking the value even if a holder panicked: what the drains' mutexes guard is
/// plain data each holder leaves whole (sets, maps, times), so a panic elsewhere leaves nothing
/// half-written to distrust, and one failed task must not stop the others.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
