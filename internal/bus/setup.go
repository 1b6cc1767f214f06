package bus

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/events"
)

// Names of the JetStream assets Setup creates.
const (
	// StreamEvents holds every event.
	StreamEvents = "SLUICE"
	// StreamDLQ holds dead letters.
	StreamDLQ = "SLUICE_DLQ"
	// BucketQuota is the quota ledger.
	BucketQuota = "sluice-quota"
	// BucketWorkloads holds one key per known workload.
	BucketWorkloads = "sluice-workloads"
	// BucketConfig mirrors the queue configuration objects.
	BucketConfig = "sluice-config"
	// BucketFence orders each admission's start against its stop
	// (internal/fence).
	BucketFence = "sluice-fence"
	// BucketShards holds the leases by which the replicas of one
	// integration split its objects (internal/shard). Its keys expire
	// ShardTTL after their last write.
	BucketShards = "sluice-shards"
	// ShardTTL is how long a lease lives unless renewed.
	ShardTTL = 10 * time.Second
	// BucketNodes holds the capacity of the nodes topology-aware flavors
	// place pods on (internal/nodecap).
	BucketNodes = "sluice-nodes"
	// BucketLQUsage holds each LocalQueue's Admission Fair Sharing usage
	// (internal/lqusage).
	BucketLQUsage = "sluice-lq-usage"
	// LQUsageMaxBytes bounds BucketLQUsage: one small key per LocalQueue
	// (some 200 bytes), so a fixed bound far below KVMaxBytes leaves the
	// store's budget for the others as it was.
	LQUsageMaxBytes = 16 << 20
)

// StreamSubjects are the subjects of the SLUICE stream.
var StreamSubjects = []string{"sluice.workload.>", "sluice.preemption.>", "sluice.quota.>", "sluice.config.>", "sluice.check.>"}

// DLQSubjects are the subjects of the SLUICE_DLQ stream.
var DLQSubjects = []string{events.DLQSubjectPrefix + ">"}

// Buckets are the KV buckets Setup creates.
var Buckets = []string{BucketQuota, BucketWorkloads, BucketConfig, BucketFence, BucketShards, BucketNodes, BucketLQUsage}

// Defaults of Config.
const (
	DefaultReplicas   = 1
	DefaultMaxAge     = 7 * 24 * time.Hour
	DefaultDuplicates = 2 * time.Minute
	DefaultDLQMaxAge  = 30 * 24 * time.Hour
	// DefaultKVHistory is 1: no reader uses an earlier revision, and one
	// kept could be replayed as the newest by a user who may read the
	// bucket (docs/security.md: an older, larger quota of a queue).
	DefaultKVHistory = 1
	// MaxReplicas is JetStream's limit.
	MaxReplicas = 5
	// MaxKVHistory is JetStream's limit on KV history.
	MaxKVHistory = 64
)

// Config sizes the streams and buckets. A zero field takes its default.
type Config struct {
	// Replicas of every stream and bucket: 1 for one server (default), 3 for
	// a production cluster. At most 5.
	Replicas int
	// MaxAge of events in SLUICE; default 7 days. Consumers that fall
	// further behind than this lose events, so keep it well above the
	// longest outage you plan for.
	MaxAge time.Duration
	// Duplicates is SLUICE's and SLUICE_DLQ's de-duplication window:
	// publishes with the same Nats-Msg-Id within it are stored once.
	// Default 2 minutes; must not exceed MaxAge.
	Duplicates time.Duration
	// DLQMaxAge of dead letters; default 30 days.
	DLQMaxAge time.Duration
	// KVHistory is how many revisions each KV key keeps, 1..64; default 1.
	// The quota ledger, the workload records and the fences keep one
	// whatever this says (their deleted keys' markers expire).
	KVHistory int
	// MaxBytes bounds SLUICE's size; past it the oldest events go, as
	// past MaxAge. DLQMaxBytes bounds SLUICE_DLQ alike. KVMaxBytes bounds
	// each bucket; a full bucket refuses writes (nothing is admitted
	// while the ledger is full) rather than dropping state. Bounded, one
	// store cannot fill the server's disk and stop the others' writes.
	// 0 keeps the store's current bound (none for a new store), so that a
	// service setting up at start leaves the bounds `sluice setup` set;
	// -1 removes it.
	MaxBytes, DLQMaxBytes, KVMaxBytes int64
}

// DefaultConfig is Config with every default filled in.
func DefaultConfig() Config {
	return Config{
		Replicas:   DefaultReplicas,
		MaxAge:     DefaultMaxAge,
		Duplicates: DefaultDuplicates,
		DLQMaxAge:  DefaultDLQMaxAge,
		KVHistory:  DefaultKVHistory,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Replicas == 0 {
		c.Replicas = d.Replicas
	}
	if c.MaxAge == 0 {
		c.MaxAge = d.MaxAge
	}
	if c.Duplicates == 0 {
		c.Duplicates = d.Duplicates
	}
	if c.DLQMaxAge == 0 {
		c.DLQMaxAge = d.DLQMaxAge
	}
	if c.KVHistory == 0 {
		c.KVHistory = d.KVHistory
	}
	return c
}

// Validate checks the configuration (zero fields count as their defaults).
func (c Config) Validate() error {
	if c.Replicas < 0 || c.MaxAge < 0 || c.Duplicates < 0 || c.DLQMaxAge < 0 || c.KVHistory < 0 {
		return fmt.Errorf("%w: negative value in %+v", ErrInvalidConfig, c)
	}
	for name, n := range map[string]int64{"max bytes": c.MaxBytes, "DLQ max bytes": c.DLQMaxBytes, "KV max bytes": c.KVMaxBytes} {
		if n < -1 {
			return fmt.Errorf("%w: %s %d: must be positive, 0 (keep the current bound) or -1 (none)", ErrInvalidConfig, name, n)
		}
	}
	c = c.withDefaults()
	if c.Replicas > MaxReplicas {
		return fmt.Errorf("%w: replicas %d: must be 1..%d", ErrInvalidConfig, c.Replicas, MaxReplicas)
	}
	if c.Duplicates > c.MaxAge {
		return fmt.Errorf("%w: duplicates window %s is longer than max age %s", ErrInvalidConfig, c.Duplicates, c.MaxAge)
	}
	if c.Duplicates > c.DLQMaxAge {
		return fmt.Errorf("%w: duplicates window %s is longer than DLQ max age %s", ErrInvalidConfig, c.Duplicates, c.DLQMaxAge)
	}
	if c.KVHistory > MaxKVHistory {
		return fmt.Errorf("%w: KV history %d: must be 1..%d", ErrInvalidConfig, c.KVHistory, MaxKVHistory)
	}
	return nil
}

// StreamConfig is the configuration Setup gives the SLUICE stream.
func (c Config) StreamConfig() jetstream.StreamConfig {
	c = c.withDefaults()
	return jetstream.StreamConfig{
		Name:        StreamEvents,
		Description: "Sluice events (CloudEvents, binary mode)",
		Subjects:    StreamSubjects,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      c.MaxAge,
		Duplicates:  c.Duplicates,
		Replicas:    c.Replicas,
		Storage:     jetstream.FileStorage,
		MaxMsgs:     -1,
		MaxBytes:    bound(c.MaxBytes),
		// The services read the last event about a workload before each
		// transition they announce. A direct get answers with the stored
		// message as it is; the stream API would wrap it in JSON with its
		// data in base64, to be encoded by the server and decoded here.
		AllowDirect: true,
	}
}

// DLQStreamConfig is the configuration Setup gives the SLUICE_DLQ stream.
func (c Config) DLQStreamConfig() jetstream.StreamConfig {
	c = c.withDefaults()
	return jetstream.StreamConfig{
		Name:        StreamDLQ,
		Description: "Sluice dead letters: messages a consumer could not handle",
		Subjects:    DLQSubjects,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      c.DLQMaxAge,
		Duplicates:  c.Duplicates,
		Replicas:    c.Replicas,
		Storage:     jetstream.FileStorage,
		MaxMsgs:     -1,
		MaxBytes:    bound(c.DLQMaxBytes),
	}
}

// KeyValueConfig is the configuration Setup gives bucket.
func (c Config) KeyValueConfig(bucket string) jetstream.KeyValueConfig {
	c = c.withDefaults()
	desc := map[string]string{
		BucketQuota:     "Sluice quota ledger: reservations per cohort tree or ClusterQueue",
		BucketWorkloads: "Sluice workloads: one key per known job",
		BucketConfig:    "Sluice queue configuration mirrored from the CRDs",
		BucketFence:     "Sluice start/stop fence: one key per admitted workload",
		BucketShards:    "Sluice leases: which integration replica handles which shard of a kind's objects, which admission replica decides for which cohort tree",
		BucketLQUsage:   "Sluice Admission Fair Sharing: each LocalQueue's decayed usage",
	}[bucket]
	if bucket == BucketShards {
		// A lease is only worth its last write: no history, and keys
		// expire so that a dead replica's shards come free.
		return jetstream.KeyValueConfig{
			Bucket:      bucket,
			Description: desc,
			History:     1,
			TTL:         ShardTTL,
			Replicas:    c.Replicas,
			Storage:     jetstream.FileStorage,
			MaxBytes:    bound(c.KVMaxBytes),
		}
	}
	kvc := jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: desc,
		History:     uint8(c.KVHistory),
		Replicas:    c.Replicas,
		Storage:     jetstream.FileStorage,
		MaxBytes:    bound(c.KVMaxBytes),
		RePublish:   Republish(bucket),
	}
	if bucket == BucketLQUsage {
		kvc.MaxBytes = lqUsageBound(c.KVMaxBytes)
	}
	switch bucket {
	case BucketQuota, BucketWorkloads, BucketFence:
		// One revision per key, and per-message TTLs: a released
		// reservation (internal/ledger), an ended workload's record and
		// its collected fence (Remove) leave a delete marker that
		// replaces the value and expires, so the bucket does not keep a
		// key for every workload that ever ran.
		kvc.History = 1
		kvc.LimitMarkerTTL = LimitMarkerTTL
	}
	return kvc
}

// Republish is how a bucket's stream copies the headers of what it
// stores to WatchSubject, waking the watches that use no consumer
// (WatchKV).
func Republish(bucket string) *jetstream.RePublish {
	return &jetstream.RePublish{Source: "$KV." + bucket + ".>", Destination: WatchSubject(bucket) + ".>", HeadersOnly: true}
}

// bound is a size limit as JetStream takes it: -1 for none.
// lqUsageBound is BucketLQUsage's size bound: LQUsageMaxBytes, or the
// buckets' bound when that is smaller.
func lqUsageBound(kv int64) int64 {
	if kv > 0 && kv < LQUsageMaxBytes {
		return kv
	}
	return LQUsageMaxBytes
}

func bound(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// keepBound is the size limit Setup gives stream: want, or with want 0
// the stream's current one.
func keepBound(ctx context.Context, js jetstream.JetStream, stream string, want int64) int64 {
	if want != 0 {
		return bound(want)
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return -1 // a new stream, or one Create reports on next
	}
	return s.CachedInfo().Config.MaxBytes
}

// LimitMarkerTTL is how long a bucket with expiring markers keeps the
// marker the server leaves when a message expires (an expired delete
// marker among them); removals set their own (DeleteMarkerTTL).
const LimitMarkerTTL = time.Minute

// Setup creates the SLUICE and SLUICE_DLQ streams and the sluice-quota,
// sluice-workloads, sluice-config, sluice-fence, sluice-shards,
// sluice-nodes and sluice-lq-usage KV buckets, or updates
// them to cfg. It
// is idempotent: running it again with the same cfg changes nothing, and
// every service may run it at start-up.
func Setup(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	main, dlq := cfg.StreamConfig(), cfg.DLQStreamConfig()
	main.MaxBytes = keepBound(ctx, js, main.Name, cfg.MaxBytes)
	dlq.MaxBytes = keepBound(ctx, js, dlq.Name, cfg.DLQMaxBytes)
	for _, sc := range []jetstream.StreamConfig{main, dlq} {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("bus: stream %s: %w", sc.Name, err)
		}
	}
	for _, b := range Buckets {
		kvc := cfg.KeyValueConfig(b)
		kvc.MaxBytes = keepBound(ctx, js, "KV_"+b, cfg.KVMaxBytes)
		if b == BucketLQUsage {
			kvc.MaxBytes = lqUsageBound(cfg.KVMaxBytes)
		}
		if b == BucketQuota {
			if err := setupQuota(ctx, js, kvc); err != nil {
				return fmt.Errorf("bus: bucket %s: %w", b, err)
			}
			continue
		}
		if _, err := js.CreateOrUpdateKeyValue(ctx, kvc); err != nil {
			return fmt.Errorf("bus: bucket %s: %w", b, err)
		}
	}
	for _, b := range []string{BucketWorkloads, BucketFence} {
		if err := PurgeLegacyMarkers(ctx, js, b); err != nil {
			return err
		}
	}
	return nil
}

// PurgeLegacyMarkers removes from bucket the delete markers written before
// deletions left markers that expire (Remove): they never go by
// themselves, and each is a key the bucket lists. Setup runs it, as the
// setup user, so that no service needs to purge a bucket.
func PurgeLegacyMarkers(ctx context.Context, js jetstream.JetStream, bucket string) error {
	kv, err := OpenKV(ctx, js, bucket)
	if err != nil {
		return fmt.Errorf("bus: bucket %s: %w", bucket, err)
	}
	if _, err := PurgeOldMarkers(ctx, kv, ">", time.Now()); err != nil {
		return fmt.Errorf("bus: bucket %s: %w", bucket, err)
	}
	return nil
}

// setupQuota creates the quota ledger's bucket, or updates it when its
// history, replicas or marker TTL differ, and opens its stream to atomic
// batches (the ledger books reservations with them). A bucket already as
// wanted is left alone: updating it through the KV API would close it to
// batches for a moment and abort those in flight.
func setupQuota(ctx context.Context, js jetstream.JetStream, kvc jetstream.KeyValueConfig) error {
	kv, err := js.KeyValue(ctx, kvc.Bucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		if _, err := js.CreateKeyValue(ctx, kvc); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return err
		}
	case err != nil:
		return err
	default:
		st, err := kv.Status(ctx)
		if err != nil {
			return err
		}
		replicas, maxBytes := kvc.Replicas, kvc.MaxBytes
		if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
			replicas, maxBytes = bs.StreamInfo().Config.Replicas, bs.StreamInfo().Config.MaxBytes
		}
		var republish *jetstream.RePublish
		if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
			republish = bs.StreamInfo().Config.RePublish
		}
		if st.History() != int64(kvc.History) || st.LimitMarkerTTL() != kvc.LimitMarkerTTL || replicas != kvc.Replicas || maxBytes != kvc.MaxBytes ||
			!reflect.DeepEqual(republish, kvc.RePublish) {
			if _, err := js.UpdateKeyValue(ctx, kvc); err != nil {
				return err
			}
		}
	}
	stream, err := js.Stream(ctx, "KV_"+kvc.Bucket)
	if err != nil {
		return err
	}
	sc := stream.CachedInfo().Config
	if sc.AllowAtomicPublish {
		return nil
	}
	sc.AllowAtomicPublish = true
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("allow atomic batches: %w", err)
	}
	return nil
}
