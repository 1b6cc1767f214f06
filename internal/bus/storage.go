package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	storageBytes = prometheus.NewDesc("sluice_storage_bytes",
		"Bytes a Sluice stream or bucket holds, by store (SLUICE, SLUICE_DLQ, KV_<bucket>).", []string{"store"}, nil)
	storageMaxBytes = prometheus.NewDesc("sluice_storage_max_bytes",
		"A Sluice stream's or bucket's size bound (bus.Config), by store; absent when unbounded. "+
			"SLUICE and SLUICE_DLQ drop their oldest messages past it; a full bucket refuses writes.", []string{"store"}, nil)
	storageMessages = prometheus.NewDesc("sluice_storage_messages",
		"Messages a Sluice stream or bucket holds, by store.", []string{"store"}, nil)
)

// StorageCollector reports the size of Sluice's streams and buckets, and
// their bounds, read from the server at each scrape: the alert rule on
// sluice_storage_bytes / sluice_storage_max_bytes warns before a bucket
// refuses writes. extra names more streams (e.g. the multicluster one).
func StorageCollector(js jetstream.JetStream, extra ...string) prometheus.Collector {
	stores := []string{StreamEvents, StreamDLQ}
	for _, b := range Buckets {
		stores = append(stores, "KV_"+b)
	}
	return storageCollector{js: js, stores: append(stores, extra...)}
}

type storageCollector struct {
	js     jetstream.JetStream
	stores []string
}

func (storageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- storageBytes
	ch <- storageMaxBytes
	ch <- storageMessages
}

// storageScrapeTimeout bounds one scrape's reads.
const storageScrapeTimeout = 5 * time.Second

func (c storageCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), storageScrapeTimeout)
	defer cancel()
	for _, name := range c.stores {
		s, err := c.js.Stream(ctx, name)
		if err != nil {
			continue // not created (a worker cluster has no multicluster stream) or not reachable: no sample
		}
		info := s.CachedInfo()
		ch <- prometheus.MustNewConstMetric(storageBytes, prometheus.GaugeValue, float64(info.State.Bytes), name)
		ch <- prometheus.MustNewConstMetric(storageMessages, prometheus.GaugeValue, float64(info.State.Msgs), name)
		if info.Config.MaxBytes > 0 {
			ch <- prometheus.MustNewConstMetric(storageMaxBytes, prometheus.GaugeValue, float64(info.Config.MaxBytes), name)
		}
	}
}
