package jobframework

import (
	corev1 "k8s.io/api/core/v1"
)

// TrimPodSpec drops, in place, what no queueing decision reads of a pod
// spec kept in an informer's cache: volumes, pull secrets, security and DNS
// settings, and of each container everything but its name, resources and
// restart policy (which marks a sidecar). What stays is what the requests
// (PodRequests), flavor assignment (node selector, affinity, tolerations),
// priority and admission read. A Job's containers are most of its size in
// memory, and an informer holds every labelled Job while it waits.
//
// Patches are computed between two copies of the cached object, and a
// trimmed field is the same in both, so trimming never writes anything
// back. Code that creates objects from a pod template (a provisioning
// request's PodTemplates, a worker cluster's copy) reads the object from
// the API server instead.
func TrimPodSpec(s *corev1.PodSpec) {
	s.Containers = trimContainers(s.Containers)
	s.InitContainers = trimContainers(s.InitContainers)
	s.EphemeralContainers = nil
	s.Volumes = nil
	s.ImagePullSecrets = nil
	s.SecurityContext = nil
	s.HostAliases = nil
	s.DNSConfig = nil
	s.ReadinessGates = nil
}

func trimContainers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return cs
	}
	out := make([]corev1.Container, len(cs))
	for i := range cs {
		c := &cs[i]
		out[i] = corev1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy}
	}
	return out
}
