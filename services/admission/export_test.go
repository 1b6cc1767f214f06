package admission

import "context"

// RecordKnown reports whether the service holds the record of the
// workload with engine key key (tests only).
func (s *Service) RecordKnown(ctx context.Context, key string) (known bool, err error) {
	err = s.read(ctx, func() { known = s.wls[key] != nil })
	return known, err
}

// RecordUID names the workload UID of the record the service holds for
// engine key key, "" if none (tests only).
func (s *Service) RecordUID(ctx context.Context, key string) (uid string, err error) {
	err = s.read(ctx, func() {
		if w := s.wls[key]; w != nil {
			uid = w.Workload.UID
		}
	})
	return uid, err
}

// HoldsAdmission reports whether the service's engine holds an admission
// of the workload with engine key key (tests only).
func (s *Service) HoldsAdmission(ctx context.Context, key string) (held bool, err error) {
	err = s.read(ctx, func() { held = s.eng.IsAdmitted(key) })
	return held, err
}

// ViewsTaken counts the views the loop took for queries (tests only).
func (s *Service) ViewsTaken() int64 { return s.views.Load() }

// Blocks lists the engine's blocks in force (tests only).
func (s *Service) Blocks(ctx context.Context) (ids []string, err error) {
	err = s.read(ctx, func() { ids = s.eng.Blocked() })
	return ids, err
}

// OwnedTrees lists the cohort trees the service decides for (tests only).
func (s *Service) OwnedTrees(ctx context.Context) (trees []string, err error) {
	err = s.read(ctx, func() { trees = s.eng.Owned() })
	return trees, err
}
