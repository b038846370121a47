package samtemplate

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// Function is one AWS::Serverless::Function of the template: the settings
// that a local run of its binary copies. Each one is the function's own
// property, else the template's Globals.Function, else its zero value,
// which means Lambda's default.
type Function struct {
	LogicalID string
	// FunctionName is the FunctionName property when it is a literal
	// string; "" when it is absent or computed (!Sub, !Ref ...), where
	// CloudFormation makes up the name at deployment.
	FunctionName string
	// Timeout is in seconds, MemorySize in MB.
	Timeout, MemorySize int
	// LogFormat ("JSON" or "Text") and ApplicationLogLevel are
	// LoggingConfig's.
	LogFormat, ApplicationLogLevel string
	// Runtime is the Runtime property ("" when absent or computed).
	Runtime string
	// Architecture is the one item of Architectures when it is a literal;
	// ArchitectureRef names the parameter when it is a !Ref. Both ""
	// means Lambda's default, x86_64.
	Architecture, ArchitectureRef string
}

// functionProperties are the properties Functions reads, on a function or
// in Globals.Function.
type functionProperties struct {
	FunctionName  yaml.Node   `yaml:"FunctionName"`
	Timeout       int         `yaml:"Timeout"`
	MemorySize    int         `yaml:"MemorySize"`
	Runtime       string      `yaml:"Runtime"`
	Architectures []yaml.Node `yaml:"Architectures"`
	LoggingConfig struct {
		LogFormat           string `yaml:"LogFormat"`
		ApplicationLogLevel string `yaml:"ApplicationLogLevel"`
	} `yaml:"LoggingConfig"`
}

// over returns p with each unset setting taken from globals.
func (p functionProperties) over(globals functionProperties) functionProperties {
	if p.FunctionName.Kind == 0 {
		p.FunctionName = globals.FunctionName
	}
	if p.Timeout == 0 {
		p.Timeout = globals.Timeout
	}
	if p.MemorySize == 0 {
		p.MemorySize = globals.MemorySize
	}
	if p.Runtime == "" {
		p.Runtime = globals.Runtime
	}
	if len(p.Architectures) == 0 {
		p.Architectures = globals.Architectures
	}
	if p.LoggingConfig.LogFormat == "" {
		p.LoggingConfig.LogFormat = globals.LoggingConfig.LogFormat
	}
	if p.LoggingConfig.ApplicationLogLevel == "" {
		p.LoggingConfig.ApplicationLogLevel = globals.LoggingConfig.ApplicationLogLevel
	}
	return p
}

// functionGlobals returns the template's Globals.Function.
func (doc *document) functionGlobals(path string) (functionProperties, error) {
	var globals functionProperties
	if !doc.Globals.Function.IsZero() {
		if err := doc.Globals.Function.Decode(&globals); err != nil {
			return globals, fmt.Errorf("samtemplate: %s: Globals.Function: %w", path, err)
		}
	}
	return globals, nil
}

// Functions returns the serverless functions declared in the SAM template
// at path, sorted by logical ID.
func Functions(path string) ([]Function, error) {
	return readAll(path, "AWS::Serverless::Function", "function", func(id string, p functionProperties, doc *document) (Function, error) {
		globals, err := doc.functionGlobals(path)
		if err != nil {
			return Function{}, err
		}
		p = p.over(globals)
		f := Function{LogicalID: id, Timeout: p.Timeout, MemorySize: p.MemorySize,
			LogFormat: p.LoggingConfig.LogFormat, ApplicationLogLevel: p.LoggingConfig.ApplicationLogLevel}
		if n := p.FunctionName; n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
			f.FunctionName = n.Value
		}
		f.Runtime = p.Runtime
		if len(p.Architectures) == 1 {
			switch n := p.Architectures[0]; {
			case n.Kind == yaml.ScalarNode && n.Tag == "!Ref":
				f.ArchitectureRef = n.Value
			case n.Kind == yaml.ScalarNode:
				f.Architecture = n.Value
			}
		}
		return f, nil
	})
}

// FindFunction returns the function with the given logical ID.
func FindFunction(functions []Function, logicalID string) (Function, error) {
	return find(functions, "function", logicalID, func(f Function) string { return f.LogicalID })
}

// FindSQSEvent returns the SQS event of the function with the given
// logical ID: one event per function, as the sample's templates have.
func FindSQSEvent(evs []SQSEvent, function string) (SQSEvent, error) {
	return find(evs, "SQS event of function", function, func(e SQSEvent) string { return e.Function })
}
