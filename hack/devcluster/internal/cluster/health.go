package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// healthClient returns an HTTP client that trusts the devcluster CA and
// presents the admin certificate.
func healthClient(l layout) (*http.Client, error) {
	f := l.pki()
	ca, err := os.ReadFile(f.CACert())
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("no certificate in " + f.CACert())
	}
	cert, err := tls.LoadX509KeyPair(f.ClientCert("admin"), f.ClientKey("admin"))
	if err != nil {
		return nil, fmt.Errorf("load admin certificate: %w", err)
	}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
	}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}, nil
}

// checkHealth returns nil if url answers 200.
func checkHealth(ctx context.Context, c *http.Client, url string) error {
	if url == "" {
		return nil
	}
	// A unix socket (containerd's) is healthy once it accepts connections.
	if sock, ok := strings.CutPrefix(url, "unix://"); ok {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", sock)
		if err != nil {
			return fmt.Errorf("connect to %s: %w", sock, err)
		}
		return conn.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("health request: %w", err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// poll calls check every interval until it returns nil, ctx is done or
// exited yields (a process that must run has ended).
func poll(ctx context.Context, interval time.Duration, exited <-chan error, check func(context.Context) error) error {
	var last error
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case err := <-exited:
			if err == nil {
				err = errors.New("a process exited")
			}
			return err
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

// clientset returns a client for the admin kubeconfig.
func clientset(l layout) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS = clientQPS
	cfg.Burst = clientBurst
	cfg.Timeout = 15 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cs, nil
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(data) > 64<<10 {
		data = data[len(data)-64<<10:]
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
