package events

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"
)

// maxNameLength is the longest Kubernetes object name (a DNS subdomain).
const maxNameLength = 253

func checkRequired(field, v string) error {
	if v == "" {
		return invalidf("%s: required", field)
	}
	return nil
}

// checkName accepts Kubernetes object names (DNS subdomains): lower-case
// letters, digits, "-" and ".", starting and ending with a letter or digit,
// at most 253 characters.
func checkName(field, v string) error {
	if err := checkRequired(field, v); err != nil {
		return err
	}
	if len(v) > maxNameLength {
		return invalidf("%s: longer than %d characters", field, maxNameLength)
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return invalidf("%s %q: %q is not allowed in a Kubernetes name", field, v, r)
		}
	}
	if !alnum(v[0]) || !alnum(v[len(v)-1]) {
		return invalidf("%s %q: must start and end with a letter or digit", field, v)
	}
	return nil
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// checkKind accepts lower-case kind and integration names: letters and digits.
func checkKind(field, v string) error {
	if err := checkRequired(field, v); err != nil {
		return err
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return invalidf("%s %q: must be lower-case letters and digits", field, v)
		}
	}
	return nil
}

func checkQuantities(field string, m map[string]string) error {
	for _, name := range slices.Sorted(maps.Keys(m)) {
		q := m[name]
		if name == "" {
			return invalidf("%s: empty resource name", field)
		}
		if _, err := resource.ParseQuantity(q); err != nil {
			return invalidf("%s[%s] %q: %w", field, name, q, err)
		}
	}
	return nil
}
