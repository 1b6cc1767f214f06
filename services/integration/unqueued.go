package integration

import (
	"slices"
	"sort"

	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// defaultQueueNamespaces are the namespaces of snap with a LocalQueue
// named jobframework.DefaultLocalQueue, sorted.
func defaultQueueNamespaces(snap configstore.Snapshot) []string {
	var out []string
	for _, lq := range snap.Objects.LocalQueues {
		if lq.Name == jobframework.DefaultLocalQueue {
			out = append(out, lq.Namespace)
		}
	}
	sort.Strings(out)
	return out
}

// hasDefaultQueue reports whether namespace has a LocalQueue named
// jobframework.DefaultLocalQueue (the webhook's Unqueued.DefaultQueue).
func (s *Service) hasDefaultQueue(namespace string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.configLocked()
	_, ok := slices.BinarySearch(s.defaultQueues, namespace)
	return ok
}

// unqueuedEntry is the option registering the webhook entry for objects
// without a queue label, for the namespaces with a default LocalQueue
// (none when the integration manages no namespace).
func (s *Service) unqueuedEntry(defaults []string) []jobframework.ConfigurationOption {
	if s.cfg.ManagedNamespaces == nil {
		return nil
	}
	if defaults == nil {
		defaults = []string{}
	}
	return []jobframework.ConfigurationOption{jobframework.WithUnqueuedEntry(jobframework.UnqueuedEntry{
		Hold: s.cfg.ManageJobsWithoutQueueName, Namespaces: defaults, Selector: s.cfg.ManagedNamespaces})}
}
