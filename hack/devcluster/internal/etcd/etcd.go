// Package etcd runs a single-member etcd server in this process, on
// loopback, for the devcluster's kube-apiserver.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Options configure Run.
type Options struct {
	DataDir    string
	ClientPort int
	PeerPort   int
	// Fsync makes etcd sync its log to disk on each commit. Off by default:
	// a development cluster trades crash safety for speed.
	Fsync bool
	// ReadyTimeout bounds how long the server may take to become ready.
	ReadyTimeout time.Duration
}

// ClientURL is the URL that clients of an etcd started with these ports use.
func ClientURL(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

// Run serves etcd until ctx is done; it writes one line to out once ready.
func Run(ctx context.Context, o Options, out io.Writer) error {
	if o.DataDir == "" || o.ClientPort <= 0 || o.PeerPort <= 0 {
		return errors.New("etcd: data dir, client port and peer port are required")
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = time.Minute
	}
	client, err := url.Parse(ClientURL(o.ClientPort))
	if err != nil {
		return fmt.Errorf("etcd: client url: %w", err)
	}
	peer, err := url.Parse("http://127.0.0.1:" + strconv.Itoa(o.PeerPort))
	if err != nil {
		return fmt.Errorf("etcd: peer url: %w", err)
	}

	cfg := embed.NewConfig()
	cfg.Name = "devcluster"
	cfg.Dir = o.DataDir
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "warn"
	cfg.UnsafeNoFsync = !o.Fsync
	cfg.QuotaBackendBytes = 8 << 30

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcd: start: %w", err)
	}
	defer e.Close()

	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintf(out, "etcd ready, serving clients on %s\n", client)
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	case <-time.After(o.ReadyTimeout):
		return fmt.Errorf("etcd: not ready after %s", o.ReadyTimeout)
	case <-ctx.Done():
		return nil
	}

	select {
	case <-ctx.Done():
		fmt.Fprintln(out, "etcd stopping")
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	}
}
