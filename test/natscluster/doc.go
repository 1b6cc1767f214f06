// Package natscluster runs Sluice's services on a real three-node NATS
// JetStream cluster (three nats-servers in the test process, routed over
// loopback), with the streams and buckets replicated three times, and
// kills the server that leads the event stream while workloads flow: no
// event is lost, no quota is over-booked, and admission resumes.
package natscluster
