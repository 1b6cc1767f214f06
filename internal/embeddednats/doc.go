// Package embeddednats runs a NATS server with JetStream inside the current
// process: the bus of `sluice dev` and of tests. Start it with Start, connect
// with Server.Connect (an in-process connection, no TCP) or through
// Server.ClientURL, and stop it with Server.Shutdown.
//
// By default it listens on a random port of 127.0.0.1 only and keeps its
// JetStream file store in a temporary directory that Shutdown removes; set
// Options.StoreDir to keep state across restarts.
package embeddednats
