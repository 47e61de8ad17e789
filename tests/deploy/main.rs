//! What is shipped besides the code, and the house's shape: the install manifests and the Helm
//! chart, the admission policy, RBAC against what the code uses, the monitoring rules, the
//! container images, the release archive, and the workspace's layout, sizes and names.

mod admission;
mod house;
mod image;
mod layout;
mod manifests;
mod monitoring;
mod rbac_drift;
mod release;
