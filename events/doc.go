// Package events declares every event type Sluice publishes, once. Each type
// is a CloudEvents `type` string of the form dev.sluice.<entity>.v1.<transition>;
// a breaking change to a payload is a new v2 type beside the old one.
package events
