package jobframework

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// Merge patches between two encodings of one object, without decoding
// what the two share.
//
// A start or a stop changes a few fields of an object of thousands of
// bytes. Decoding both encodings into maps of interface values allocated
// for every field of both, at every start and stop of every job, and was
// a third of all JSON decoding in `sluice dev` at 50,000 Jobs. The two
// encodings come from the same type through encoding/json, so a member
// that did not change is byte for byte the same in both: rawDiff splits
// each object into its members' bytes (slices of the input, nothing
// copied) and looks only into members whose bytes differ.

// errNotObject: rawMembers was given something other than a JSON object.
var errNotObject = errors.New("not a JSON object")

// rawMember is one member of an encoded object: its key and its value's
// bytes within the encoding.
type rawMember struct {
	key   string
	value []byte
}

// rawMembers splits an encoded object (as encoding/json writes it: valid,
// no insignificant white space needed but allowed) into its members, in
// order. The values are slices of doc.
func rawMembers(doc []byte) ([]rawMember, error) {
	i := skipSpace(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return nil, errNotObject
	}
	i = skipSpace(doc, i+1)
	var out []rawMember
	if i < len(doc) && doc[i] == '}' {
		return out, nil
	}
	for {
		if i >= len(doc) || doc[i] != '"' {
			return nil, errNotObject
		}
		end, err := skipString(doc, i)
		if err != nil {
			return nil, err
		}
		key, err := decodeKey(doc[i:end])
		if err != nil {
			return nil, err
		}
		i = skipSpace(doc, end)
		if i >= len(doc) || doc[i] != ':' {
			return nil, errNotObject
		}
		i = skipSpace(doc, i+1)
		vend, err := skipValue(doc, i)
		if err != nil {
			return nil, err
		}
		out = append(out, rawMember{key: key, value: doc[i:vend]})
		i = skipSpace(doc, vend)
		if i >= len(doc) {
			return nil, errNotObject
		}
		switch doc[i] {
		case ',':
			i = skipSpace(doc, i+1)
		case '}':
			return out, nil
		default:
			return nil, errNotObject
		}
	}
}

// decodeKey reads an encoded string; most keys have no escapes and are
// taken as they are.
func decodeKey(s []byte) (string, error) {
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s[1 : len(s)-1]), nil
	}
	var k string
	err := json.Unmarshal(s, &k)
	return k, err
}

func skipSpace(doc []byte, i int) int {
	for i < len(doc) && (doc[i] == ' ' || doc[i] == '\t' || doc[i] == '\n' || doc[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at doc[i].
func skipString(doc []byte, i int) (int, error) {
	for j := i + 1; j < len(doc); j++ {
		switch doc[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errNotObject
}

// skipValue returns the index just past the value starting at doc[i].
func skipValue(doc []byte, i int) (int, error) {
	if i >= len(doc) {
		return 0, errNotObject
	}
	switch doc[i] {
	case '"':
		return skipString(doc, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(doc); j++ {
			switch doc[j] {
			case '"':
				end, err := skipString(doc, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errNotObject
	default: // a number, true, false or null
		j := i
		for j < len(doc) && !strings.ContainsRune(",}] \t\n\r", rune(doc[j])) {
			j++
		}
		if j == i {
			return 0, errNotObject
		}
		return j, nil
	}
}

// isObject: the encoded value is an object.
func isObject(v []byte) bool { return len(v) > 0 && v[0] == '{' }

// rawDiff is the JSON merge patch (RFC 7386) that turns the encoded object
// a into b, both encoded the same way (as encoding/json writes them, or
// indented alike), so that equal values are equal bytes: what b adds or
// changes (its encoding, shared with b), nil for what it removes (a member
// b has as null counts as removed, as in a parsed document); objects are
// compared member by member, anything else (arrays included) is replaced
// whole when its bytes differ.
func rawDiff(a, b []byte) (map[string]any, error) {
	return diffMembers(a, b, false, false, false)
}

// jobPatchDiff is rawDiff with the rule MergePatch follows for pod
// templates and the object's own metadata (stringMaps): there, a removed
// labels or annotations map is removed key by key, each key it had.
func jobPatchDiff(a, b []byte) (map[string]any, error) {
	return diffMembers(a, b, true, false, true)
}

// diffMembers is rawDiff; with keyByKey set, within a pod template
// (inTemplate, or below a member named "template") or the top object's
// metadata (top, then a member named "metadata") it removes a whole
// labels or annotations map one key at a time.
func diffMembers(a, b []byte, keyByKey, inTemplate, top bool) (map[string]any, error) {
	am, err := rawMembers(a)
	if err != nil {
		return nil, err
	}
	bm, err := rawMembers(b)
	if err != nil {
		return nil, err
	}
	was := make(map[string][]byte, len(am))
	for _, m := range am {
		was[m.key] = m.value
	}
	// removed is what the patch says of a member b removes: null, or, for
	// a template's string map, null for each key it had.
	removed := func(key string, old []byte) (any, error) {
		if !keyByKey || !inTemplate || !stringMaps[key] || !isObject(old) {
			return nil, nil
		}
		keys, err := rawMembers(old)
		if err != nil {
			return nil, err
		}
		each := make(map[string]any, len(keys))
		for _, m := range keys {
			each[m.key] = nil
		}
		return each, nil
	}
	out := map[string]any{}
	seen := make(map[string]bool, len(bm))
	for _, m := range bm {
		seen[m.key] = true
		av, ok := was[m.key]
		switch {
		case ok && bytes.Equal(av, m.value):
		case ok && isObject(av) && isObject(m.value):
			d, err := diffMembers(av, m.value, keyByKey, inTemplate || m.key == "template" || top && m.key == "metadata", false)
			if err != nil {
				return nil, err
			}
			if len(d) > 0 {
				out[m.key] = d
			}
		case string(m.value) == "null":
			if out[m.key], err = removed(m.key, av); err != nil {
				return nil, err
			}
		default:
			out[m.key] = json.RawMessage(m.value)
		}
	}
	for _, m := range am {
		if !seen[m.key] {
			if out[m.key], err = removed(m.key, m.value); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}
