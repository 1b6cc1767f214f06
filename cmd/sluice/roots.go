package main

// The image has no CA bundle of its own (one static binary on an empty
// base): when the system has none, Go uses this one, Mozilla's, compiled
// in. A NATS server or an OTLP collector with a certificate of a public CA
// is then trusted in the image as it is on a host.
import _ "golang.org/x/crypto/x509roots/fallback"
