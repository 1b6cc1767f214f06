package events

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

var errBadEncoding = errors.New("bad percent-encoding")

// encodeHeaderValue percent-encodes a CloudEvents attribute value for a NATS
// header as the NATS binding requires: space, double quote, percent and every
// byte outside printable ASCII (U+0021..U+007E) become %XY.
func encodeHeaderValue(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xF])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func needsEscape(c byte) bool { return c <= ' ' || c == '"' || c == '%' || c >= 0x7F }

// decodeHeaderValue reverses encodeHeaderValue: it first unquotes an RFC 7230
// quoted string (older senders), then percent-decodes once, and rejects
// results that are not valid UTF-8.
func decodeHeaderValue(v string) (string, error) {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		var b strings.Builder
		for i := 1; i < len(v)-1; i++ {
			c := v[i]
			if c == '\\' && i+1 < len(v)-1 {
				i++
				c = v[i]
			}
			b.WriteByte(c)
		}
		v = b.String()
	}
	if !strings.Contains(v, "%") {
		if !utf8.ValidString(v) {
			return "", fmt.Errorf("%w: not UTF-8", errBadEncoding)
		}
		return v, nil
	}
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			out = append(out, v[i])
			continue
		}
		if i+2 >= len(v) {
			return "", fmt.Errorf("%w: truncated escape at %d", errBadEncoding, i)
		}
		hi, ok1 := unhex(v[i+1])
		lo, ok2 := unhex(v[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("%w: %q at %d", errBadEncoding, v[i:i+3], i)
		}
		out = append(out, hi<<4|lo)
		i += 2
	}
	if !utf8.Valid(out) {
		return "", fmt.Errorf("%w: not UTF-8", errBadEncoding)
	}
	return string(out), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
