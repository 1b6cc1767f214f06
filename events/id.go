package events

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"reflect"
	"strconv"
)

// ID returns the deterministic CloudEvents id (and JetStream Nats-Msg-Id) of
// one logical event: the same type, key and discriminators always give the
// same id, so a republished or duplicated event is dropped by JetStream's
// de-duplication window and recognised by consumers.
//
// key is the workload UID for workload events, or the entity's own key
// (ClusterQueue name, kind/namespace/name of a config object) otherwise.
// discriminators tell apart repeated transitions of the same entity, e.g. the
// ledger revision of an admission or the reason of a pending event. Each is
// formatted with %v, except that slices and arrays are hashed element by
// element (so []string{"a", "b"} and []string{"a b"} differ); pass slices in
// a deterministic order.
//
// The id is 32 lower-case hex digits (128 bits of SHA-256).
func ID(eventType, key string, discriminators ...any) string {
	h := sha256.New()
	part(h, eventType)
	part(h, key)
	for _, d := range discriminators {
		discriminator(h, reflect.ValueOf(d))
	}
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:16])
}

func discriminator(h hash.Hash, v reflect.Value) {
	if v.IsValid() && (v.Kind() == reflect.Slice || v.Kind() == reflect.Array) {
		part(h, "\x00list")
		part(h, strconv.Itoa(v.Len()))
		for i := range v.Len() {
			discriminator(h, v.Index(i))
		}
		return
	}
	if !v.IsValid() {
		part(h, "<nil>")
		return
	}
	part(h, fmt.Sprint(v.Interface()))
}

// part writes s length-prefixed, so ("ab","c") and ("a","bc") differ.
func part(h hash.Hash, s string) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
	h.Write([]byte(s))
}
