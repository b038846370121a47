package bench

import (
	"encoding/json"
	"sort"
	"strings"
	"sync"
)

// Meter counts the DynamoDB requests it is shown, by operation, and the
// request units DynamoDB would bill for them (see units.go). To know the
// size of an item before an UpdateItem or DeleteItem, it keeps the size of
// each attribute of every item it saw written; tables must be created
// through it (CreateTable tells it their keys). Safe for concurrent use.
type Meter struct {
	mu     sync.Mutex
	counts map[string]int
	read   float64
	write  float64
	keys   map[string][]string       // table -> key attribute names
	items  map[string]map[string]int // table + key -> attribute -> size of name and value
}

// NewMeter returns a Meter with nothing counted.
func NewMeter() *Meter {
	return &Meter{counts: map[string]int{}, keys: map[string][]string{}, items: map[string]map[string]int{}}
}

// Usage is what a Meter counted.
type Usage struct {
	// Requests by operation ("PutItem"), retries included.
	Requests map[string]int
	// ReadUnits and WriteUnits are computed, not measured: see units.go.
	ReadUnits, WriteUnits float64
}

// Total returns the number of requests.
func (u Usage) Total() int {
	n := 0
	for _, c := range u.Requests {
		n += c
	}
	return n
}

// Ops returns the operations in u, sorted, with their counts, as
// "PutItem 2, TransactWriteItems 1".
func (u Usage) Ops() string {
	names := make([]string, 0, len(u.Requests))
	for op := range u.Requests {
		names = append(names, op)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, op := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(op)
	}
	return b.String()
}

// Take returns what was counted since the last Take and starts again. The
// item sizes it keeps are not forgotten.
func (m *Meter) Take() Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := Usage{Requests: m.counts, ReadUnits: m.read, WriteUnits: m.write}
	m.counts, m.read, m.write = map[string]int{}, 0, 0
	return u
}

// Observe accounts for one request of operation op with body req, answered
// with status and body resp.
func (m *Meter) Observe(op string, req []byte, status int, resp []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts[op]++
	ok := status/100 == 2
	switch op {
	case "CreateTable":
		var in struct {
			TableName string
			KeySchema []struct{ AttributeName string }
		}
		if json.Unmarshal(req, &in) == nil && ok {
			for _, k := range in.KeySchema {
				m.keys[in.TableName] = append(m.keys[in.TableName], k.AttributeName)
			}
		}
	case "PutItem":
		var in struct {
			TableName string
			Item      item
		}
		if json.Unmarshal(req, &in) == nil {
			m.write += m.put(in.TableName, in.Item, ok)
		}
	case "UpdateItem":
		var in updateOp
		if json.Unmarshal(req, &in) == nil {
			m.write += m.update(in, ok)
		}
	case "DeleteItem":
		var in keyOp
		if json.Unmarshal(req, &in) == nil {
			m.write += m.delete(in.TableName, in.Key, ok)
		}
	case "TransactWriteItems":
		m.write += m.transactWrite(req, ok)
	case "GetItem":
		var in struct{ ConsistentRead bool }
		var out struct{ Item item }
		if json.Unmarshal(req, &in) == nil && ok && json.Unmarshal(resp, &out) == nil {
			m.read += readUnits(itemSize(out.Item), in.ConsistentRead)
		}
	case "BatchGetItem":
		m.read += batchGetUnits(req, resp, ok)
	case "TransactGetItems":
		var out struct{ Responses []struct{ Item item } }
		if ok && json.Unmarshal(resp, &out) == nil {
			for _, r := range out.Responses {
				m.read += 2 * readUnits(itemSize(r.Item), true)
			}
		}
	case "Query", "Scan":
		var in struct{ ConsistentRead bool }
		var out struct{ Items []item }
		if json.Unmarshal(req, &in) == nil && ok && json.Unmarshal(resp, &out) == nil {
			size := 0
			for _, it := range out.Items {
				size += itemSize(it)
			}
			m.read += readUnits(size, in.ConsistentRead)
		}
	}
}

// LargestItem is the size of the largest item the meter knows in table,
// by DynamoDB's rules (units.go), 0 if it knows none.
func (m *Meter) LargestItem(table string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for id, sizes := range m.items {
		if strings.HasPrefix(id, table+"\x00") {
			n = max(n, total(sizes))
		}
	}
	return n
}

// ident names an item by its table and key attributes.
func (m *Meter) ident(table string, it item) string {
	var b strings.Builder
	b.WriteString(table)
	for _, k := range m.keys[table] {
		b.WriteByte(0)
		raw, _ := json.Marshal(it[k])
		b.Write(raw)
	}
	return b.String()
}

func attrSizes(it item) map[string]int {
	sizes := make(map[string]int, len(it))
	for name, v := range it {
		sizes[name] = len(name) + valueSize(v)
	}
	return sizes
}

func total(sizes map[string]int) int {
	n := 0
	for _, s := range sizes {
		n += s
	}
	return n
}

// put returns the units of putting it, and records it if done.
func (m *Meter) put(table string, it item, done bool) float64 {
	id := m.ident(table, it)
	next := attrSizes(it)
	units := writeUnits(max(total(m.items[id]), total(next)))
	if done {
		m.items[id] = next
	}
	return units
}

// keyOp is a request that names one item by its key.
type keyOp struct {
	TableName string
	Key       item
}

type updateOp struct {
	TableName                 string
	Key                       item
	UpdateExpression          string
	ExpressionAttributeNames  map[string]string
	ExpressionAttributeValues map[string]attrValue
}

func (m *Meter) update(in updateOp, done bool) float64 {
	id := m.ident(in.TableName, in.Key)
	before := m.items[id]
	if before == nil {
		before = attrSizes(in.Key) // an update of an absent item creates it
	}
	after := applyUpdate(before, in.UpdateExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	units := writeUnits(max(total(before), total(after)))
	if done {
		m.items[id] = after
	}
	return units
}

func (m *Meter) delete(table string, key item, done bool) float64 {
	id := m.ident(table, key)
	units := writeUnits(total(m.items[id]))
	if done {
		delete(m.items, id)
	}
	return units
}

// transactWrite counts each action twice, as DynamoDB does, and applies
// them when the transaction went through. A cancelled transaction is
// counted as if it had run.
func (m *Meter) transactWrite(req []byte, done bool) float64 {
	var in struct {
		TransactItems []struct {
			Put *struct {
				TableName string
				Item      item
			}
			Update         *updateOp
			Delete         *keyOp
			ConditionCheck *keyOp
		}
	}
	if json.Unmarshal(req, &in) != nil {
		return 0
	}
	units := 0.0
	for _, a := range in.TransactItems {
		switch {
		case a.Put != nil:
			units += 2 * m.put(a.Put.TableName, a.Put.Item, done)
		case a.Update != nil:
			units += 2 * m.update(*a.Update, done)
		case a.Delete != nil:
			units += 2 * m.delete(a.Delete.TableName, a.Delete.Key, done)
		case a.ConditionCheck != nil:
			units += 2 * writeUnits(total(m.items[m.ident(a.ConditionCheck.TableName, a.ConditionCheck.Key)]))
		}
	}
	return units
}

// batchGetUnits counts each requested key: the item's size if returned, 1
// unit's worth if absent, nothing if left unprocessed.
func batchGetUnits(req, resp []byte, ok bool) float64 {
	if !ok {
		return 0
	}
	var in struct {
		RequestItems map[string]struct {
			Keys           []item
			ConsistentRead bool
		}
	}
	var out struct {
		Responses       map[string][]item
		UnprocessedKeys map[string]struct{ Keys []item }
	}
	if json.Unmarshal(req, &in) != nil || json.Unmarshal(resp, &out) != nil {
		return 0
	}
	units := 0.0
	for table, r := range in.RequestItems {
		found := out.Responses[table]
		for _, it := range found {
			units += readUnits(itemSize(it), r.ConsistentRead)
		}
		absent := len(r.Keys) - len(found) - len(out.UnprocessedKeys[table].Keys)
		units += float64(max(0, absent)) * readUnits(0, r.ConsistentRead)
	}
	return units
}

// applyUpdate returns the attribute sizes after an UpdateExpression. It
// knows SET name = value (values, if_not_exists, list_append, + and -),
// REMOVE, ADD and DELETE on top-level attributes; a nested path changes its
// top-level attribute by the size of the values it sets.
func applyUpdate(before map[string]int, expr string, names map[string]string, values map[string]attrValue) map[string]int {
	after := make(map[string]int, len(before)+4)
	for k, v := range before {
		after[k] = v
	}
	for _, cl := range updateClauses(expr) {
		for _, action := range splitTopLevel(cl.body) {
			path, rhs, _ := strings.Cut(action, "=")
			if cl.verb != "SET" {
				path, rhs, _ = strings.Cut(strings.TrimSpace(action), " ")
			}
			name, nested := topName(strings.TrimSpace(path), names)
			if name == "" {
				continue
			}
			size := placeholdersSize(rhs, values)
			_, exists := after[name]
			switch {
			case cl.verb == "REMOVE" && !nested:
				delete(after, name)
			case cl.verb == "REMOVE", cl.verb == "DELETE":
				// Shrinks the item: counting the larger size is what
				// DynamoDB bills for anyway.
			case nested, cl.verb == "ADD" && exists:
				after[name] += size
			case strings.Contains(rhs, "if_not_exists(") && exists:
			case (strings.Contains(rhs, "+") || strings.Contains(rhs, "-")) && exists:
				// A number changed in place keeps about its size.
			case strings.Contains(rhs, "list_append(") && exists:
				after[name] += size
			default:
				after[name] = len(name) + size
			}
		}
	}
	return after
}

type clause struct{ verb, body string }

// updateClauses splits an UpdateExpression at its SET, REMOVE, ADD and
// DELETE keywords.
func updateClauses(expr string) []clause {
	var out []clause
	fields := strings.Fields(expr)
	for _, f := range fields {
		switch up := strings.ToUpper(f); up {
		case "SET", "REMOVE", "ADD", "DELETE":
			out = append(out, clause{verb: up})
			continue
		}
		if len(out) == 0 {
			continue
		}
		out[len(out)-1].body += f + " "
	}
	return out
}

// splitTopLevel splits at commas outside parentheses.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if rest := strings.TrimSpace(s[start:]); rest != "" {
		out = append(out, s[start:])
	}
	return out
}

// topName returns the top-level attribute a path names, and whether the
// path goes below it.
func topName(path string, names map[string]string) (string, bool) {
	end := strings.IndexAny(path, ".[")
	first := path
	if end >= 0 {
		first = path[:end]
	}
	if strings.HasPrefix(first, "#") {
		first = names[first]
	}
	return first, end >= 0
}

// placeholdersSize adds up the sizes of the :values in s.
func placeholdersSize(s string, values map[string]attrValue) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] != ':' {
			continue
		}
		j := i + 1
		for j < len(s) && (s[j] == '_' || s[j] >= '0' && s[j] <= '9' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z') {
			j++
		}
		n += valueSize(values[s[i:j]])
		i = j - 1
	}
	return n
}
