package admission

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sluice-dev/sluice/internal/engine"
)

// maxShapes bounds how many distinct requests the service shares; past
// it, a pod set keeps maps of its own.
const maxShapes = 10000

// shapes shares the requests of pod sets that ask for the same thing. A
// cluster's jobs mostly come from a few templates, and a request map is
// the largest part of what the service and its engine hold for each
// waiting workload (~300 bytes, once as written and once canonical). The
// maps it returns are shared: nothing may change them.
type shapes struct {
	byKey map[string]shape
}

// shape is one set of requests as written (the record's form, which
// reservations carry) and in the engine's canonical units.
type shape struct {
	text  map[string]string
	canon map[string]int64
}

// of returns the shape of reqs, or an error naming the request that is
// not a quantity.
func (s *shapes) of(reqs map[string]string) (shape, error) {
	key := shapeKey(reqs)
	if sh, ok := s.byKey[key]; ok {
		return sh, nil
	}
	sh := shape{text: reqs, canon: make(map[string]int64, len(reqs))}
	for r, v := range reqs {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return shape{}, fmt.Errorf("request %s=%q: %w", r, v, err)
		}
		sh.canon[r] = engine.Canonical(r, q)
	}
	if s.byKey == nil {
		s.byKey = map[string]shape{}
	}
	if len(s.byKey) < maxShapes {
		s.byKey[key] = sh
	}
	return sh, nil
}

// shapeKey writes reqs in resource order; a name or a quantity holds no
// '=' or ';'. (One that did would only share less.)
func shapeKey(reqs map[string]string) string {
	names := make([]string, 0, len(reqs))
	for r := range reqs {
		names = append(names, r)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, r := range names {
		b.WriteString(r)
		b.WriteByte('=')
		b.WriteString(reqs[r])
		b.WriteByte(';')
	}
	return b.String()
}
