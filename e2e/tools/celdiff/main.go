// Command celdiff evaluates DRA CEL device selectors with upstream's own package,
// k8s.io/dynamic-resource-allocation/cel (v0.35.4), for tests/dra/test_cel_differential.py.
//
// Input (stdin): a JSON array of cases
//
//	{"id": "...", "expression": "...", "consumableCapacity": false,
//	 "device": {"driver": "...", "allowMultipleAllocations": false,
//	            "attributes": {"<qualified name>": {"int": 1} | {"bool": true} | {"string": "s"} | {"version": "1.2.3"} | {}},
//	            "capacity": {"<qualified name>": "40Gi"}}}
//
// Output (stdout): one JSON object per case, in order:
//
//	{"id": "...", "class": "value" | "compile" | "runtime" | "cost", "value": true|false, "message": "..."}
//
// "compile" is a CompilationResult.Error (the scheduler's Cache.GetOrCompile, no cost
// estimation); "cost" a runtime error from exceeding the cost limit; "runtime" any other
// DeviceMatches error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/google/cel-go/interpreter"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/cel"
)

type attr struct {
	Int     *int64  `json:"int,omitempty"`
	Bool    *bool   `json:"bool,omitempty"`
	String  *string `json:"string,omitempty"`
	Version *string `json:"version,omitempty"`
}

type device struct {
	Driver                   string            `json:"driver"`
	AllowMultipleAllocations *bool             `json:"allowMultipleAllocations,omitempty"`
	Attributes               map[string]attr   `json:"attributes"`
	Capacity                 map[string]string `json:"capacity"`
}

type input struct {
	ID                 string `json:"id"`
	Expression         string `json:"expression"`
	ConsumableCapacity bool   `json:"consumableCapacity"`
	Device             device `json:"device"`
}

type output struct {
	ID      string `json:"id"`
	Class   string `json:"class"`
	Value   bool   `json:"value"`
	Message string `json:"message,omitempty"`
}

func main() {
	var cases []input
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		fmt.Fprintln(os.Stderr, "celdiff: decoding the corpus:", err)
		os.Exit(2)
	}
	caches := map[bool]*cel.Cache{
		false: cel.NewCache(10, cel.Features{EnableConsumableCapacity: false}),
		true:  cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}),
	}
	enc := json.NewEncoder(os.Stdout)
	for _, c := range cases {
		out := output{ID: c.ID}
		expr := caches[c.ConsumableCapacity].GetOrCompile(c.Expression)
		if expr.Error != nil {
			out.Class, out.Message = "compile", expr.Error.Error()
		} else {
			d, err := toDevice(c.Device)
			if err != nil {
				fmt.Fprintf(os.Stderr, "celdiff: case %s: %v\n", c.ID, err)
				os.Exit(2)
			}
			matches, _, err := expr.DeviceMatches(context.Background(), d)
			switch {
			case err == nil:
				out.Class, out.Value = "value", matches
			case isCostLimit(err):
				out.Class, out.Message = "cost", err.Error()
			default:
				out.Class, out.Message = "runtime", err.Error()
			}
		}
		if err := enc.Encode(out); err != nil {
			fmt.Fprintln(os.Stderr, "celdiff:", err)
			os.Exit(2)
		}
	}
}

func isCostLimit(err error) bool {
	var cancelled interpreter.EvalCancelledError
	if errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded {
		return true
	}
	return strings.Contains(err.Error(), "actual cost limit exceeded")
}

func toDevice(in device) (cel.Device, error) {
	out := cel.Device{
		Driver:                   in.Driver,
		AllowMultipleAllocations: in.AllowMultipleAllocations,
		Attributes:               map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{},
		Capacity:                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{},
	}
	for name, a := range in.Attributes {
		out.Attributes[resourceapi.QualifiedName(name)] = resourceapi.DeviceAttribute{
			IntValue: a.Int, BoolValue: a.Bool, StringValue: a.String, VersionValue: a.Version,
		}
	}
	for name, q := range in.Capacity {
		v, err := resource.ParseQuantity(q)
		if err != nil {
			return out, fmt.Errorf("capacity %s: %w", name, err)
		}
		out.Capacity[resourceapi.QualifiedName(name)] = resourceapi.DeviceCapacity{Value: v}
	}
	return out, nil
}
