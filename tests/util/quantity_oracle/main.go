// Command quantity_oracle prints what k8s.io/apimachinery's ParseQuantity makes of each input
// line, to regenerate tests/util/quantity_upstream.json (see tests/util/test_quantity.py).
//
// Output per line: "ERR", or "OK <canonical or SKIP> <nanos or BIG> <sign>", where nanos is
// the exact amount in 10^-9 units. Inputs whose int32 exponent lands near -2^31, or that have
// more than 18 digits and a large exponent, make ParseQuantity itself run for minutes (it
// materialises the number): leave them out.
//
//	cd tests/util/quantity_oracle && GOFLAGS=-mod=mod go build -o /tmp/qgo . && /tmp/qgo < inputs.txt
package main

import (
	"bufio"
	"fmt"
	"math/big"
	"os"

	"k8s.io/apimachinery/pkg/api/resource"
)

func main() {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for sc.Scan() {
		q, err := resource.ParseQuantity(sc.Text())
		if err != nil {
			fmt.Fprintln(w, "ERR")
			continue
		}
		d := q.AsDec()
		scale := int64(d.Scale()) // the amount is unscaled * 10^-scale
		u := new(big.Int).Set(d.UnscaledBig())
		canon := "SKIP" // String() of an extreme scale runs for minutes too
		if scale > -1000 && scale < 1000 && len(q.String()) <= 80 {
			canon = q.String()
		}
		shift := 9 - scale
		if shift > 60 || (shift > 0 && int64(len(u.String()))+shift > 60) {
			fmt.Fprintln(w, "OK", canon, "BIG", u.Sign())
			continue
		}
		if shift >= 0 {
			u.Mul(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(shift), nil))
		} else {
			u.Quo(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(-shift), nil))
		}
		fmt.Fprintln(w, "OK", canon, u.String(), u.Sign())
	}
}
