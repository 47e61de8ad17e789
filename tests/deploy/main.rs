//! What is shipped besides the code, and the house's shape: the install manifests and the Helm
//! chart, the admission policy, RBAC against what the code uses, the monitoring rules, the
//! container images, the release archive, the docs' links, and the workspace's layout, sizes and
//! names.

mod admission;
mod docs_links;
mod house;
mod image;
mod layout;
mod manifests;
mod monitoring;
mod rbac_drift;
mod release;
