package jobframework

import (
	"fmt"
	"maps"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// protoObject is a typed API object that encodes itself as protobuf, as
// every type of k8s.io/api does.
type protoObject interface {
	runtime.Object
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

// packed is an informer's copy of a typed object kept as its protobuf
// encoding, with only the metadata that keys, indexes and event handlers
// read kept decoded. A typed Job is ~3 KB in memory even trimmed (its
// struct alone, with the pod template's spec inline, is 1.3 KB), most of
// it zero fields; its encoding is a few hundred bytes. An informer holds
// every labelled object of its kind, which at 100,000 waiting Jobs made
// the Job cache the largest part of Sluice's memory.
//
// Everything that reads an object decodes it first, and the adapter's
// Decode unpacks it into a fresh typed object (DecodeAs); raw is never
// changed once packed, so copies share it.
type packed struct {
	metav1.TypeMeta
	// ObjectMeta holds the name, namespace, UID and resource version, and
	// when packed withLabels the labels and annotations (a Grouper's index
	// reads them; for other kinds they stay in raw, a small map costing
	// ~300 bytes decoded); the rest of the metadata is in raw. Labels or
	// annotations held here are absent from raw.
	metav1.ObjectMeta
	raw []byte
	typ reflect.Type // of the typed object: what unpack fills
}

// Pack encodes obj, which the caller owns and gives up, when it is a typed
// object that encodes itself; anything else (an unstructured object, a
// tombstone) is returned as it is. withLabels keeps its labels and
// annotations decoded.
func Pack(obj runtime.Object, withLabels bool) runtime.Object {
	po, ok := obj.(protoObject)
	if !ok || reflect.TypeOf(obj).Kind() != reflect.Pointer {
		return obj // a tombstone or another type: kept as it is
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return obj
	}
	out := &packed{typ: reflect.TypeOf(obj).Elem()}
	out.TypeMeta.SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	out.Name, out.Namespace, out.UID, out.ResourceVersion = m.GetName(), m.GetNamespace(), m.GetUID(), m.GetResourceVersion()
	// What is kept decoded is left out of the encoding.
	m.SetName("")
	m.SetNamespace("")
	m.SetUID("")
	m.SetResourceVersion("")
	if withLabels {
		out.Labels, out.Annotations = m.GetLabels(), m.GetAnnotations()
		m.SetLabels(nil)
		m.SetAnnotations(nil)
	}
	raw, err := po.Marshal()
	if err != nil {
		// Not seen for an object the API server encoded; the informer
		// keeps it as it came rather than stop its watch over it.
		out.restore(m)
		return obj
	}
	out.raw = raw
	return out
}

// restore writes into m the metadata kept decoded.
func (o *packed) restore(m metav1.Object) {
	m.SetName(o.Name)
	m.SetNamespace(o.Namespace)
	m.SetUID(o.UID)
	m.SetResourceVersion(o.ResourceVersion)
	if o.Labels != nil {
		m.SetLabels(maps.Clone(o.Labels))
	}
	if o.Annotations != nil {
		m.SetAnnotations(maps.Clone(o.Annotations))
	}
}

// unpack returns a fresh typed copy of the object: changing it changes
// nothing in the cache.
func (o *packed) unpack() (runtime.Object, error) {
	obj, ok := reflect.New(o.typ).Interface().(protoObject)
	if !ok {
		return nil, fmt.Errorf("unpack %s/%s: %s does not decode itself", o.Namespace, o.Name, o.typ)
	}
	if err := obj.Unmarshal(o.raw); err != nil {
		return nil, fmt.Errorf("unpack %s/%s: %w", o.Namespace, o.Name, err)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("unpack %s/%s: %w", o.Namespace, o.Name, err)
	}
	o.restore(m)
	obj.GetObjectKind().SetGroupVersionKind(o.GroupVersionKind())
	return obj, nil
}

// DeepCopyObject implements runtime.Object; the encoding is shared, as it
// never changes.
func (o *packed) DeepCopyObject() runtime.Object {
	c := &packed{TypeMeta: o.TypeMeta, raw: o.raw, typ: o.typ}
	o.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return c
}
