package embeddednats

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Defaults.
const (
	DefaultHost         = "127.0.0.1"
	DefaultReadyTimeout = 10 * time.Second
)

// Errors.
var (
	// ErrNotReady is returned when the server did not accept connections in time.
	ErrNotReady = errors.New("embeddednats: server not ready")
	// ErrInvalidOptions is wrapped by Options.Validate.
	ErrInvalidOptions = errors.New("embeddednats: invalid options")
)

// Options configure the embedded server. The zero value is a usable test
// server: random port on 127.0.0.1, JetStream in a temporary directory.
type Options struct {
	// Host to listen on; default 127.0.0.1.
	Host string
	// Port to listen on; 0 picks a free port (use 4222 for the usual one).
	Port int
	// DontListen disables the TCP listener: only Connect works.
	DontListen bool
	// StoreDir is the JetStream file-store directory. Empty means a new
	// temporary directory that Shutdown removes.
	StoreDir string
	// ServerName names the server (shown in advisories and monitoring).
	ServerName string
	// MaxMemory and MaxStore limit JetStream's memory and file storage in
	// bytes; 0 lets the server choose.
	MaxMemory, MaxStore int64
	// SyncAlways makes the file store fsync every write (slow; default off,
	// like nats-server, which syncs every 2 minutes).
	SyncAlways bool
	// Logger receives the server's log lines; nil discards them.
	Logger *zerolog.Logger
	// Debug also logs the server's debug lines (needs Logger).
	Debug bool
	// ReadyTimeout bounds the wait for the server to accept connections;
	// default 10s.
	ReadyTimeout time.Duration

	// JetStreamDomain names the server's JetStream, so that servers
	// joined by leaf nodes can tell theirs apart ("" for none).
	JetStreamDomain string
	// LeafHost and LeafPort accept leaf node connections (LeafPort 0:
	// none). Leaf nodes log in as one of LeafUsers.
	LeafHost string
	LeafPort int
	// LeafAdvertise is the HOST:PORT leaf nodes are told to reconnect to
	// ("": the listen address). A leaf node adds what it is told to the
	// URL it was given, so behind a load balancer or a proxy it must name
	// that, or leaf nodes would reconnect around it.
	LeafAdvertise string
	// LeafUsers are the users leaf nodes log in as, each allowed only its
	// subjects. With any, clients that give no credentials are
	// LocalUser, allowed everything.
	LeafUsers []LeafUser
	// LeafRemotes are hubs this server joins as a leaf node:
	// nats-leaf://user:password@host:port URLs.
	LeafRemotes []string
}

// LeafUser is a user leaf nodes log in as. Publish and Subscribe are the
// subjects the leaf node may send into this server and receive from it.
type LeafUser struct {
	Name, Password     string
	Publish, Subscribe []string
}

// LocalUser is who clients without credentials are once LeafUsers exist.
const LocalUser = "sluice"

// Validate checks the options.
func (o Options) Validate() error {
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("%w: port %d: must be 0..65535", ErrInvalidOptions, o.Port)
	}
	if o.MaxMemory < 0 || o.MaxStore < 0 {
		return fmt.Errorf("%w: JetStream limits must not be negative", ErrInvalidOptions)
	}
	if o.LeafPort < 0 || o.LeafPort > 65535 {
		return fmt.Errorf("%w: leaf port %d: must be 0..65535", ErrInvalidOptions, o.LeafPort)
	}
	if o.LeafAdvertise != "" {
		if _, port, err := net.SplitHostPort(o.LeafAdvertise); err != nil || port == "" {
			return fmt.Errorf("%w: leaf advertise %q: must be HOST:PORT", ErrInvalidOptions, o.LeafAdvertise)
		}
		if o.LeafPort == 0 {
			return fmt.Errorf("%w: leaf advertise %q without a leaf port", ErrInvalidOptions, o.LeafAdvertise)
		}
	}
	for _, u := range o.LeafUsers {
		if u.Name == "" || u.Name == LocalUser || u.Password == "" {
			return fmt.Errorf("%w: leaf user %q: a name other than %q and a password are required", ErrInvalidOptions, u.Name, LocalUser)
		}
	}
	for _, r := range o.LeafRemotes {
		if u, err := url.Parse(r); err != nil || u.Host == "" {
			return fmt.Errorf("%w: leaf remote %q: not a nats-leaf://user:password@host:port URL", ErrInvalidOptions, r)
		}
	}
	if o.ReadyTimeout < 0 {
		return fmt.Errorf("%w: ready timeout %s: must not be negative", ErrInvalidOptions, o.ReadyTimeout)
	}
	return nil
}

// Server is a running embedded NATS server.
type Server struct {
	ns       *server.Server
	storeDir string
	tempDir  bool
	once     sync.Once
}

// Start starts a server with JetStream enabled and waits until it accepts
// connections.
func Start(opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Server{storeDir: opts.StoreDir}
	if s.storeDir == "" {
		dir, err := os.MkdirTemp("", "sluice-nats-")
		if err != nil {
			return nil, fmt.Errorf("embeddednats: store dir: %w", err)
		}
		s.storeDir, s.tempDir = dir, true
	}
	host := opts.Host
	if host == "" {
		host = DefaultHost
	}
	port := opts.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	sopts := &server.Options{
		ServerName:         opts.ServerName,
		Host:               host,
		Port:               port,
		DontListen:         opts.DontListen,
		JetStream:          true,
		StoreDir:           s.storeDir,
		JetStreamMaxMemory: opts.MaxMemory,
		JetStreamMaxStore:  opts.MaxStore,
		SyncAlways:         opts.SyncAlways,
		NoSigs:             true,
		NoLog:              opts.Logger == nil,
		JetStreamDomain:    opts.JetStreamDomain,
	}
	if err := leafOptions(sopts, opts); err != nil {
		s.removeTemp()
		return nil, err
	}
	ns, err := server.NewServer(sopts)
	if err != nil {
		s.removeTemp()
		return nil, fmt.Errorf("embeddednats: %w", err)
	}
	if opts.Logger != nil {
		ns.SetLogger(logAdapter{l: opts.Logger.With().Str("component", "nats-server").Logger()}, opts.Debug, false)
	}
	s.ns = ns
	ns.Start()
	wait := opts.ReadyTimeout
	if wait == 0 {
		wait = DefaultReadyTimeout
	}
	if !ns.ReadyForConnections(wait) {
		s.Shutdown()
		return nil, fmt.Errorf("%w after %s", ErrNotReady, wait)
	}
	if !ns.JetStreamEnabled() {
		s.Shutdown()
		return nil, fmt.Errorf("%w: JetStream did not start", ErrNotReady)
	}
	return s, nil
}

// leafOptions sets up leaf node connections in both directions.
func leafOptions(sopts *server.Options, opts Options) error {
	if opts.LeafPort != 0 {
		sopts.LeafNode.Host = opts.LeafHost
		if sopts.LeafNode.Host == "" {
			sopts.LeafNode.Host = DefaultHost
		}
		sopts.LeafNode.Port = opts.LeafPort
		sopts.LeafNode.Advertise = opts.LeafAdvertise
	}
	if len(opts.LeafUsers) > 0 {
		// Leaf nodes log in as ordinary users: those carry permissions,
		// the leaf node block's own users do not.
		local, err := randomPassword()
		if err != nil {
			return err
		}
		sopts.Users = append(sopts.Users, &server.User{Username: LocalUser, Password: local})
		sopts.NoAuthUser = LocalUser
		for _, u := range opts.LeafUsers {
			sopts.Users = append(sopts.Users, &server.User{Username: u.Name, Password: u.Password, Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: u.Publish},
				Subscribe: &server.SubjectPermission{Allow: u.Subscribe},
			}})
		}
	}
	for _, r := range opts.LeafRemotes {
		u, err := url.Parse(r)
		if err != nil {
			return fmt.Errorf("%w: leaf remote: %v", ErrInvalidOptions, err)
		}
		sopts.LeafNode.Remotes = append(sopts.LeafNode.Remotes, &server.RemoteLeafOpts{URLs: []*url.URL{u}})
	}
	if len(opts.LeafRemotes) > 0 {
		sopts.LeafNode.ReconnectInterval = time.Second
	}
	return nil
}

func randomPassword() (string, error) {
	b := make([]byte, 18)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("embeddednats: password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// LeafConnections is the number of leaf node connections the server has.
func (s *Server) LeafConnections() int { return s.ns.NumLeafNodes() }

// ClientURL is the nats:// URL clients connect to ("" with DontListen).
func (s *Server) ClientURL() string {
	if s.ns.Addr() == nil {
		return ""
	}
	return s.ns.ClientURL()
}

// StoreDir is the JetStream store directory in use.
func (s *Server) StoreDir() string { return s.storeDir }

// Connect opens an in-process client connection (no TCP).
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect("", append([]nats.Option{nats.InProcessServer(s.ns)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("embeddednats: connect: %w", err)
	}
	return nc, nil
}

// NATSServer exposes the underlying server, e.g. for monitoring.
func (s *Server) NATSServer() *server.Server { return s.ns }

// Shutdown stops the server, waits for it to finish and removes a temporary
// store directory. It is safe to call more than once.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		if s.ns != nil {
			s.ns.Shutdown()
			s.ns.WaitForShutdown()
		}
		s.removeTemp()
	})
}

func (s *Server) removeTemp() {
	if s.tempDir {
		_ = os.RemoveAll(s.storeDir)
	}
}

// logAdapter sends nats-server log lines to zerolog.
type logAdapter struct{ l zerolog.Logger }

func (a logAdapter) Noticef(format string, v ...any) { a.l.Info().Msgf(format, v...) }
func (a logAdapter) Warnf(format string, v ...any)   { a.l.Warn().Msgf(format, v...) }
func (a logAdapter) Fatalf(format string, v ...any)  { a.l.Error().Msgf(format, v...) }
func (a logAdapter) Errorf(format string, v ...any)  { a.l.Error().Msgf(format, v...) }
func (a logAdapter) Debugf(format string, v ...any)  { a.l.Debug().Msgf(format, v...) }
func (a logAdapter) Tracef(format string, v ...any)  { a.l.Trace().Msgf(format, v...) }
