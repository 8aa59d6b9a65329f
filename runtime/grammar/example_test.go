package grammar_test

import (
	"fmt"

	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/grammar"
)

// A choices constraint on a generation request: the engine's sampler
// draws only tokens that keep the output on one of the answers, and the
// engine stops as soon as one is complete.
func ExampleChoices() {
	g, err := grammar.Choices([]string{"RISK_LEVEL: 1", "RISK_LEVEL: 2", "RISK_LEVEL: 3", "RISK_LEVEL: 4", "RISK_LEVEL: 5"})
	if err != nil {
		panic(err)
	}
	req := engine.Request{Prompt: "…", Constraint: g, Logprobs: &engine.LogprobOptions{Top: 5}}
	fmt.Println(req.Constraint.(*grammar.Grammar))
	// Output:
	// root ::= "RISK_LEVEL: 1" | "RISK_LEVEL: 2" | "RISK_LEVEL: 3" | "RISK_LEVEL: 4" | "RISK_LEVEL: 5"
}

// A JSON schema becomes a GBNF grammar with llama.cpp's whitespace policy.
func ExampleJSONSchemaGBNF() {
	src, err := grammar.JSONSchemaGBNF([]byte(`{"type":"object","properties":{"risk_level":{"type":"integer","minimum":1,"maximum":5}},"required":["risk_level"]}`))
	if err != nil {
		panic(err)
	}
	fmt.Print(src)
	// Output:
	// risk-level ::= ([1-5]) space
	// risk-level-kv ::= "\"risk_level\"" space ":" space risk-level
	// root ::= "{" space risk-level-kv "}" space
	// space ::= | " " | "\n"{1,2} [ \t]{0,20}
}
