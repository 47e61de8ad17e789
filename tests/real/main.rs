//! The suites on real things, each skipped with one line when its environment is absent (as
//! in CI): [`control_plane`], rollboot against a real etcd, kube-apiserver, controller-manager
//! and scheduler (`scripts/e2e-realcluster.sh`); [`nodes`], rollboot as installed on real
//! nodes with the real kubelet, containerd and systemd (`scripts/e2e-realnodes.sh`).

mod control_plane;
mod nodes;
