package integration

// Unexported helpers under test from integration_test, which can import
// the adapters.
var CacheTransform = cacheTransform
