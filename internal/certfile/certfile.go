// Package certfile serves a TLS certificate kept in a pair of PEM files
// (a mounted Secret), loaded again when the files change, so a renewed
// certificate (cert-manager's, or a chart upgrade's) is served without a
// restart. SelfSigned makes a certificate where no one else issues one
// (the webhook of `sluice dev`, its aggregated API).
package certfile

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// ReloadEvery bounds how often a handshake looks at the certificate
// files: a mounted Secret (cert-manager's renewal, or the chart's on
// upgrade) changes under a running process.
const ReloadEvery = 10 * time.Second

// Pair serves the certificate in a pair of PEM files, loaded again
// when either file changes. A pair that fails to load keeps the last good
// one serving (a renewal writes the two files one after the other).
type Pair struct {
	certFile, keyFile string
	now               func() time.Time
	onError           func(error)

	mu       sync.Mutex
	cert     *tls.Certificate
	stamp    string
	lookedAt time.Time
}

// Load serves the pair certFile, keyFile; now is the clock and onError
// hears of a changed pair that does not load.
func Load(certFile, keyFile string, now func() time.Time, onError func(error)) (*Pair, error) {
	f := &Pair{certFile: certFile, keyFile: keyFile, now: now, onError: onError}
	stamp, err := f.stampNow()
	if err != nil {
		return nil, err
	}
	if err := f.load(stamp); err != nil {
		return nil, err
	}
	f.lookedAt = now()
	return f, nil
}

// stampNow names the files' current versions by size and modification
// time (through symlinks, as a Secret volume swaps them).
func (f *Pair) stampNow() (string, error) {
	var stamp string
	for _, p := range []string{f.certFile, f.keyFile} {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("serving certificate: %w", err)
		}
		stamp += fmt.Sprintf("%d/%d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return stamp, nil
}

func (f *Pair) load(stamp string) error {
	c, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return fmt.Errorf("serving certificate %s, key %s: %w", f.certFile, f.keyFile, err)
	}
	f.cert, f.stamp = &c, stamp
	return nil
}

// GetCertificate is tls.Config's hook.
func (f *Pair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := f.now(); now.Sub(f.lookedAt) >= ReloadEvery {
		f.lookedAt = now
		stamp, err := f.stampNow()
		if err == nil && stamp != f.stamp {
			err = f.load(stamp)
		}
		if err != nil && f.onError != nil {
			f.onError(err)
		}
	}
	return f.cert, nil
}
