package embeddednats

import (
	"errors"
	"fmt"
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
}

// Validate checks the options.
func (o Options) Validate() error {
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("%w: port %d: must be 0..65535", ErrInvalidOptions, o.Port)
	}
	if o.MaxMemory < 0 || o.MaxStore < 0 {
		return fmt.Errorf("%w: JetStream limits must not be negative", ErrInvalidOptions)
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
