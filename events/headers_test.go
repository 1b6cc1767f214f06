package events

import (
	"strings"
	"testing"
)

func TestHeaderValueEncoding(t *testing.T) {
	cases := map[string]string{
		"/sluice/admission":     "/sluice/admission",
		"Euro € 😀":              "Euro%20%E2%82%AC%20%F0%9F%98%80",
		`say "hi" 100%`:         "say%20%22hi%22%20100%25",
		"tab\there\r\n":         "tab%09here%0D%0A",
		"team-a/train.v2.final": "team-a/train.v2.final",
	}
	for in, want := range cases {
		got := encodeHeaderValue(in)
		if got != want {
			t.Errorf("encode(%q) = %q, want %q", in, got, want)
		}
		if strings.ContainsAny(got, " \"\r\n\t") {
			t.Errorf("encode(%q) = %q keeps a character headers cannot carry", in, got)
		}
		back, err := decodeHeaderValue(got)
		if err != nil || back != in {
			t.Errorf("decode(%q) = %q, %v; want %q", got, back, err, in)
		}
	}
	decodeCases := map[string]string{
		`"quoted value"`:           "quoted value",
		`"with \"escapes\""`:       `with "escapes"`,
		"lower%c3%a9":              "loweré",
		"unneeded%41%42":           "unneededAB",
		"  padded  ":               "padded",
		`"quoted%20and%20escaped"`: "quoted and escaped",
	}
	for in, want := range decodeCases {
		if got, err := decodeHeaderValue(in); err != nil || got != want {
			t.Errorf("decode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"%", "%4", "%zz", "%C0%A0", "%FF", "a%e2%82"} {
		if got, err := decodeHeaderValue(bad); err == nil {
			t.Errorf("decode(%q) = %q, want an error", bad, got)
		}
	}
}
