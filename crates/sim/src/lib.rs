//! rotor-sim: a simulated Kubernetes cluster that speaks the real HTTP/JSON API.
//!
//! It is the cluster rotor is tested, demonstrated and benchmarked on, because no real API
//! server can run on our machines. Layers, from the wire inward, each using only those below it:
//! - [`api`]: discovery and resource paths, list/watch/get/create/update/patch/delete, eviction;
//! - [`cluster`]: the state and the simulated control plane (scheduler, workload controllers,
//!   kubelets, disruption controller, node-group autoscaler), each controller keeping what it
//!   remembers between steps in its own module;
//! - [`store`]: typed collections with a shared resourceVersion and a change log for watches,
//!   and secondary indexes; [`managed_fields`] keeps each distinct managedFields tree once;
//! - [`meta`]: what the model and the API both answer with: the Status of a call
//!   ([`meta::ApiError`] when it fails), DeleteOptions and generated names.
//!
//! Around them:
//! - [`scenario`] and [`seed`]: YAML scenarios and the cluster they describe;
//! - [`server`] and [`admin`]: the running process, fault injection and `/sim/v1`;
//! - [`moto`]: the AWS emulator beside it, for the AWS provider's demo and tests;
//! - [`authz`]: bearer tokens and RBAC, enforced only when a policy is loaded;
//! - [`request_info`]: what a request addresses and its verb, read by [`api`] and [`authz`];
//! - [`rotor_kinds`]: rotor's own resources (RotationPolicy, DrainRule), kept as JSON.

pub mod admin;
pub mod api;
pub mod authz;
pub mod cluster;
pub mod kinds;
pub mod kubeconfig;
pub mod managed_fields;
pub mod meta;
pub mod moto;
pub mod request_info;
pub mod rotor_kinds;
pub mod scenario;
pub mod seed;
pub mod server;
pub mod state;
pub mod store;
