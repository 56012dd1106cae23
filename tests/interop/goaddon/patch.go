// patch.go owns the PATCH formats: JSON merge patch (RFC 7386), strategic merge
// patch (applied as a merge patch, its $-directives dropped), and JSON patch
// (RFC 6902: add, remove, replace, move, copy, test).
package main

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

const acceptedPatchTypes = "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json"

// patchers apply a decoded patch to a copy of the current object, by Content-Type.
var patchers = map[string]func(cur interface{}, patch interface{}) (interface{}, *statusError){
	"application/merge-patch+json": func(cur, patch interface{}) (interface{}, *statusError) {
		if _, ok := patch.(map[string]interface{}); !ok {
			return nil, errBadRequest("a merge patch must be a JSON object")
		}
		return mergePatch(cur, patch), nil
	},
	"application/strategic-merge-patch+json": func(cur, patch interface{}) (interface{}, *statusError) {
		if _, ok := patch.(map[string]interface{}); !ok {
			return nil, errBadRequest("a strategic merge patch must be a JSON object")
		}
		return mergePatch(cur, dropDirectives(patch)), nil
	},
	"application/json-patch+json": jsonPatch,
}

// mergePatch applies an RFC 7386 merge patch.
func mergePatch(target, patch interface{}) interface{} {
	p, ok := patch.(map[string]interface{})
	if !ok {
		return deepCopy(patch)
	}
	t, ok := target.(map[string]interface{})
	if !ok {
		t = map[string]interface{}{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
		} else {
			t[k] = mergePatch(t[k], v)
		}
	}
	return t
}

// dropDirectives removes strategic merge patch directives ($patch, $retainKeys,
// $setElementOrder/..., $deleteFromPrimitiveList/...), meaningless for widgets.
func dropDirectives(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, x := range t {
			if !strings.HasPrefix(k, "$") {
				out[k] = dropDirectives(x)
			}
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, x := range t {
			out[i] = dropDirectives(x)
		}
		return out
	}
	return v
}

// jsonPatch applies an RFC 6902 patch; cur is already a private copy.
func jsonPatch(cur, patch interface{}) (interface{}, *statusError) {
	ops, ok := patch.([]interface{})
	if !ok {
		return nil, errBadRequest("a JSON patch must be a JSON array of operations")
	}
	doc := cur
	for i, raw := range ops {
		op, ok := raw.(map[string]interface{})
		if !ok {
			return nil, errBadRequest(fmt.Sprintf("JSON patch operation %d is not an object", i))
		}
		name, _ := op["op"].(string)
		path, hasPath := op["path"].(string)
		if !hasPath {
			return nil, errBadRequest(fmt.Sprintf("JSON patch operation %d (%s) has no path", i, name))
		}
		tokens, err := parsePointer(path)
		if err != nil {
			return nil, errBadRequest(err.Error())
		}
		value, hasValue := op["value"]
		needsValue := name == "add" || name == "replace" || name == "test"
		if needsValue && !hasValue {
			return nil, errBadRequest(fmt.Sprintf("JSON patch operation %d (%s) has no value", i, name))
		}
		var from []string
		if name == "move" || name == "copy" {
			f, ok := op["from"].(string)
			if !ok {
				return nil, errBadRequest(fmt.Sprintf("JSON patch operation %d (%s) has no from", i, name))
			}
			if from, err = parsePointer(f); err != nil {
				return nil, errBadRequest(err.Error())
			}
		}
		switch name {
		case "add":
			doc, err = pointerAdd(doc, tokens, deepCopy(value))
		case "remove":
			doc, _, err = pointerRemove(doc, tokens)
		case "replace":
			if _, err = pointerGet(doc, tokens); err == nil {
				if doc, _, err = pointerRemove(doc, tokens); err == nil {
					doc, err = pointerAdd(doc, tokens, deepCopy(value))
				}
			}
		case "move":
			var moved interface{}
			if doc, moved, err = pointerRemove(doc, from); err == nil {
				doc, err = pointerAdd(doc, tokens, moved)
			}
		case "copy":
			var copied interface{}
			if copied, err = pointerGet(doc, from); err == nil {
				doc, err = pointerAdd(doc, tokens, deepCopy(copied))
			}
		case "test":
			var got interface{}
			if got, err = pointerGet(doc, tokens); err == nil && !jsonEqual(got, value) {
				err = fmt.Errorf("testing value %s failed", path)
			}
		default:
			return nil, errBadRequest(fmt.Sprintf("Unexpected kind: %q", name))
		}
		if err != nil {
			return nil, errUnprocessable(fmt.Sprintf("the server rejected our request due to an error in our request: %v", err))
		}
	}
	return doc, nil
}

// parsePointer splits an RFC 6901 JSON pointer into unescaped tokens.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return []string{}, nil
	}
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("JSON pointer %q must start with /", p)
	}
	parts := strings.Split(p[1:], "/")
	for i, t := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return parts, nil
}

func arrayIndex(tok string, n int, allowEnd bool) (int, error) {
	if allowEnd && tok == "-" {
		return n, nil
	}
	i, err := strconv.Atoi(tok)
	if err != nil || i < 0 || (tok != "0" && strings.HasPrefix(tok, "0")) {
		return 0, fmt.Errorf("invalid array index %q", tok)
	}
	limit := n - 1
	if allowEnd {
		limit = n
	}
	if i > limit {
		return 0, fmt.Errorf("array index %d out of bounds", i)
	}
	return i, nil
}

func pointerGet(doc interface{}, tokens []string) (interface{}, error) {
	cur := doc
	for _, tok := range tokens {
		switch c := cur.(type) {
		case map[string]interface{}:
			v, ok := c[tok]
			if !ok {
				return nil, fmt.Errorf("missing value at %q", tok)
			}
			cur = v
		case []interface{}:
			i, err := arrayIndex(tok, len(c), false)
			if err != nil {
				return nil, err
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("cannot descend into a %s at %q", jsonType(cur), tok)
		}
	}
	return cur, nil
}

// modify walks to the parent of the last token and returns the document with
// that parent replaced by what at returns.
func modify(doc interface{}, tokens []string, at func(parent interface{}, last string) (interface{}, error)) (interface{}, error) {
	if len(tokens) == 1 {
		return at(doc, tokens[0])
	}
	switch c := doc.(type) {
	case map[string]interface{}:
		child, ok := c[tokens[0]]
		if !ok {
			return nil, fmt.Errorf("missing value at %q", tokens[0])
		}
		next, err := modify(child, tokens[1:], at)
		if err != nil {
			return nil, err
		}
		c[tokens[0]] = next
		return c, nil
	case []interface{}:
		i, err := arrayIndex(tokens[0], len(c), false)
		if err != nil {
			return nil, err
		}
		next, err := modify(c[i], tokens[1:], at)
		if err != nil {
			return nil, err
		}
		c[i] = next
		return c, nil
	}
	return nil, fmt.Errorf("cannot descend into a %s at %q", jsonType(doc), tokens[0])
}

func pointerAdd(doc interface{}, tokens []string, value interface{}) (interface{}, error) {
	if len(tokens) == 0 {
		return value, nil
	}
	return modify(doc, tokens, func(parent interface{}, last string) (interface{}, error) {
		switch c := parent.(type) {
		case map[string]interface{}:
			c[last] = value
			return c, nil
		case []interface{}:
			i, err := arrayIndex(last, len(c), true)
			if err != nil {
				return nil, err
			}
			out := make([]interface{}, 0, len(c)+1)
			out = append(out, c[:i]...)
			out = append(out, value)
			return append(out, c[i:]...), nil
		}
		return nil, fmt.Errorf("cannot add to a %s", jsonType(parent))
	})
}

func pointerRemove(doc interface{}, tokens []string) (interface{}, interface{}, error) {
	if len(tokens) == 0 {
		return nil, nil, fmt.Errorf("cannot remove the whole document")
	}
	var removed interface{}
	out, err := modify(doc, tokens, func(parent interface{}, last string) (interface{}, error) {
		switch c := parent.(type) {
		case map[string]interface{}:
			v, ok := c[last]
			if !ok {
				return nil, fmt.Errorf("missing value at %q", last)
			}
			removed = v
			delete(c, last)
			return c, nil
		case []interface{}:
			i, err := arrayIndex(last, len(c), false)
			if err != nil {
				return nil, err
			}
			removed = c[i]
			out := make([]interface{}, 0, len(c)-1)
			out = append(out, c[:i]...)
			return append(out, c[i+1:]...), nil
		}
		return nil, fmt.Errorf("cannot remove from a %s", jsonType(parent))
	})
	return out, removed, err
}

// jsonEqual compares JSON values, numbers by value.
func jsonEqual(a, b interface{}) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		fx, okx := new(big.Float).SetString(string(x))
		fy, oky := new(big.Float).SetString(string(y))
		return okx && oky && fx.Cmp(fy) == 0
	case map[string]interface{}:
		y, ok := b.(map[string]interface{})
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	case []interface{}:
		y, ok := b.([]interface{})
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}
