package schemas

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"
)

// FS holds every schema file, named <type>.json at its root.
//
//go:embed *.json
var FS embed.FS

// File is the name of the schema file of eventType in FS and in this
// directory.
func File(eventType string) string { return eventType + ".json" }

// Read returns the schema of eventType.
func Read(eventType string) ([]byte, error) {
	b, err := fs.ReadFile(FS, File(eventType))
	if err != nil {
		return nil, fmt.Errorf("schemas: %s: %w", eventType, err)
	}
	return b, nil
}

// Types lists the event types that have a schema, in file-name order.
func Types() ([]string, error) {
	entries, err := fs.ReadDir(FS, ".")
	if err != nil {
		return nil, fmt.Errorf("schemas: %w", err)
	}
	var out []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() {
			out = append(out, name)
		}
	}
	return out, nil
}
