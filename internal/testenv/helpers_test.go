package testenv_test

import (
	"testing"

	"github.com/lambdakit/lambdakit/internal/testenv"
)

// moto is the package's moto_server, started once by TestMain.
var moto testenv.Moto

func TestMain(m *testing.M) { moto.Run(m) }
