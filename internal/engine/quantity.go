package engine

import (
	"k8s.io/apimachinery/pkg/api/resource"
)

// Canonical converts a quantity of the named resource to the engine's unit:
// milli-units for cpu (so 500m is 500), whole units otherwise.
func Canonical(res string, q resource.Quantity) int64 {
	if res == "cpu" {
		return q.MilliValue()
	}
	return q.Value()
}

// Format renders a canonical value back as a Kubernetes quantity string.
func Format(res string, v int64) string {
	switch {
	case res == "cpu":
		return resource.NewMilliQuantity(v, resource.DecimalSI).String()
	case res == "memory" || res == "ephemeral-storage":
		if v%1024 == 0 {
			return resource.NewQuantity(v, resource.BinarySI).String()
		}
		return resource.NewQuantity(v, resource.DecimalSI).String()
	case v != 0 && v%(1<<20) == 0:
		// An extended resource counted in bytes (accelerator memory,
		// hugepages): 10Gi, not 10737418240. No count of devices is a
		// multiple of 2^20.
		return resource.NewQuantity(v, resource.BinarySI).String()
	default:
		return resource.NewQuantity(v, resource.DecimalSI).String()
	}
}
