// Package e2e runs Sluice against a real Kubernetes control plane: the
// devcluster (etcd, kube-apiserver, controller-manager, scheduler and kwok
// nodes) and the sluice binary's `dev` command with its embedded JetStream.
// Jobs, pods, the scheduler and the Job controller are all real.
//
// The tests run only with SLUICE_E2E=1 (`make e2e`), because the first
// devcluster build takes minutes.
package e2e
