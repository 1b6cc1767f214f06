package queueconfig

import (
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DeviceClassMapping counts the devices pods claim of its DeviceClasses
// as the quota resource Name (Kueue's resources.deviceClassMappings): a
// pod whose ResourceClaimTemplate asks for 2 devices of a mapped class is
// queued as requesting 2 of Name.
type DeviceClassMapping struct {
	Name             corev1.ResourceName `json:"name"`
	DeviceClassNames []string            `json:"deviceClassNames"`
}

// Errors of device claims that cannot be counted; the job is not queued
// until it is changed (or the mapping is).
var (
	// ErrUnmappedDeviceClass: a claim asks for devices of a DeviceClass
	// no mapping names, so its quota cannot be counted.
	ErrUnmappedDeviceClass = errors.New("DeviceClass is not mapped in resources.deviceClassMappings")
	// ErrUnsupportedDeviceRequest: a device request Sluice (as Kueue)
	// cannot count: allocationMode All, or firstAvailable.
	ErrUnsupportedDeviceRequest = errors.New("device request cannot be counted against quota")
)

// ClaimSpecs finds the specs of the claims pods refer to.
type ClaimSpecs interface {
	// Template is the spec of ResourceClaimTemplate namespace/name.
	Template(namespace, name string) (*resourcev1.ResourceClaimSpec, error)
	// Claim is the spec of ResourceClaim namespace/name.
	Claim(namespace, name string) (*resourcev1.ResourceClaimSpec, error)
}

// validateDeviceClassMappings checks the mappings as Kueue does: each
// names a resource and at least one DeviceClass, and no DeviceClass is
// mapped twice.
func validateDeviceClassMappings(p *field.Path, ms []DeviceClassMapping) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]string{}
	for i, m := range ms {
		mp := p.Index(i)
		if m.Name == "" {
			errs = append(errs, field.Required(mp.Child("name"), "the quota resource the devices count as"))
		}
		if len(m.DeviceClassNames) == 0 {
			errs = append(errs, field.Required(mp.Child("deviceClassNames"), "at least one DeviceClass"))
		}
		for j, c := range m.DeviceClassNames {
			cp := mp.Child("deviceClassNames").Index(j)
			switch prev, dup := seen[c]; {
			case c == "":
				errs = append(errs, field.Required(cp, "a DeviceClass name"))
			case dup:
				errs = append(errs, field.Duplicate(cp, c+" (also mapped to "+prev+")"))
			default:
				seen[c] = string(m.Name)
			}
		}
	}
	return errs
}

// CountsDevices reports whether device claims are counted against quota
// (some deviceClassMappings are set).
func (r *Resources) CountsDevices() bool { return r != nil && len(r.DeviceClassMappings) > 0 }

// DeviceRequests is what one pod's device claims count as, per mapped
// resource: for each claim (by ResourceClaimTemplate or ResourceClaim),
// each exact device request of a mapped DeviceClass adds its count
// (default 1); admin-access requests count nothing. nil when no mapping
// is set. An error names the claim and request; it wraps
// ErrUnmappedDeviceClass or ErrUnsupportedDeviceRequest when the job
// itself is at fault, or the lookup's error.
func (r *Resources) DeviceRequests(namespace string, claims []corev1.PodResourceClaim, specs ClaimSpecs) (corev1.ResourceList, error) {
	if !r.CountsDevices() || len(claims) == 0 {
		return nil, nil
	}
	classes := map[string]corev1.ResourceName{}
	for _, m := range r.DeviceClassMappings {
		for _, c := range m.DeviceClassNames {
			classes[c] = m.Name
		}
	}
	counts := map[corev1.ResourceName]int64{}
	for i, c := range claims {
		where := "resourceClaims[" + strconv.Itoa(i) + "] (" + c.Name + ")"
		var spec *resourcev1.ResourceClaimSpec
		var err error
		switch {
		case c.ResourceClaimTemplateName != nil:
			spec, err = specs.Template(namespace, *c.ResourceClaimTemplateName)
		case c.ResourceClaimName != nil:
			spec, err = specs.Claim(namespace, *c.ResourceClaimName)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		for j, req := range spec.Devices.Requests {
			rp := fmt.Sprintf("%s: devices.requests[%d] (%s)", where, j, req.Name)
			e := req.Exactly
			switch {
			case e == nil:
				return nil, fmt.Errorf("%s: firstAvailable: %w", rp, ErrUnsupportedDeviceRequest)
			case e.AdminAccess != nil && *e.AdminAccess:
				continue
			case e.AllocationMode == resourcev1.DeviceAllocationModeAll:
				return nil, fmt.Errorf("%s: allocationMode All: %w", rp, ErrUnsupportedDeviceRequest)
			case e.AllocationMode != "" && e.AllocationMode != resourcev1.DeviceAllocationModeExactCount:
				return nil, fmt.Errorf("%s: allocationMode %s: %w", rp, e.AllocationMode, ErrUnsupportedDeviceRequest)
			}
			name, ok := classes[e.DeviceClassName]
			if !ok {
				return nil, fmt.Errorf("%s: DeviceClass %q: %w", rp, e.DeviceClassName, ErrUnmappedDeviceClass)
			}
			n := e.Count
			if n <= 0 {
				n = 1
			}
			counts[name] += n
		}
	}
	if len(counts) == 0 {
		return nil, nil
	}
	out := make(corev1.ResourceList, len(counts))
	for name, n := range counts {
		out[name] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return out, nil
}

// AddRequests returns reqs with more added: a new list when more has
// anything (reqs may be shared), reqs itself otherwise.
func AddRequests(reqs, more corev1.ResourceList) corev1.ResourceList {
	if len(more) == 0 {
		return reqs
	}
	out := make(corev1.ResourceList, len(reqs)+len(more))
	for n, q := range reqs {
		out[n] = q.DeepCopy()
	}
	for n, q := range more {
		if have, ok := out[n]; ok {
			q = q.DeepCopy()
			q.Add(have)
		}
		out[n] = q
	}
	return out
}
