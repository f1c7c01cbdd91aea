package ctl

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// sizeSuffixes are the suffixes of a Kubernetes resource quantity
// (k8s.io/apimachinery/pkg/api/resource) as base and exponent: a size given
// to ctl means what the same string means in a PVC's storage request, so
// that "1G" is 10^9 bytes in both and "1Gi" 2^30.
var sizeSuffixes = map[string]struct{ base, exponent int64 }{
	"": {10, 0}, "n": {10, -9}, "u": {10, -6}, "m": {10, -3},
	"k": {10, 3}, "M": {10, 6}, "G": {10, 9}, "T": {10, 12}, "P": {10, 15}, "E": {10, 18},
	"Ki": {2, 10}, "Mi": {2, 20}, "Gi": {2, 30}, "Ti": {2, 40}, "Pi": {2, 50}, "Ei": {2, 60},
}

// sizeHelp is what a size may be, for the usage text and errors.
const sizeHelp = "a number with k, M, G, T, P, E (powers of 1000) or Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024), as Kubernetes writes sizes"

// parseSize reads a --size or --limit flag: "" for none. It takes what
// Kubernetes' ParseQuantity takes (a decimal number, a fraction or an
// exponent such as 1e9 too) and rounds a fraction of a byte up, as
// Quantity.Value does; it refuses what ParseQuantity refuses ("1K", "1GB",
// "1GiB", "1g"), a negative size, and one CSI's int64 cannot carry, where
// Kubernetes would cap it.
func parseSize(value string) (int64, error) {
	if value == "" {
		return 0, nil
	}
	bytes, err := quantityBytes(value)
	if err != nil {
		return 0, fmt.Errorf("size %q: %v", value, err)
	}
	return bytes, nil
}

// quantityBytes is a quantity's value in whole bytes, rounded up.
func quantityBytes(value string) (int64, error) {
	number := strings.TrimPrefix(value, "+")
	if strings.HasPrefix(number, "-") {
		return 0, fmt.Errorf("a size cannot be negative")
	}
	end := strings.IndexFunc(number, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if end < 0 {
		end = len(number)
	}
	digits, suffix := number[:end], number[end:]
	whole, fraction, _ := strings.Cut(digits, ".")
	if whole+fraction == "" || strings.Contains(fraction, ".") {
		return 0, fmt.Errorf("want %s", sizeHelp)
	}
	base, exponent, err := quantitySuffix(suffix)
	if err != nil {
		return 0, err
	}
	amount, _ := new(big.Int).SetString(whole+fraction, 10)
	if amount.Sign() == 0 {
		return 0, nil
	}
	scale := new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(fraction))), nil))
	size := new(big.Rat).Mul(new(big.Rat).SetInt(amount), scale)
	power := new(big.Int).Exp(big.NewInt(base), big.NewInt(abs(exponent)), nil)
	if exponent >= 0 {
		size.Mul(size, new(big.Rat).SetInt(power))
	} else {
		size.Quo(size, new(big.Rat).SetInt(power))
	}
	// Round up to a whole byte: a positive size is never less than one.
	bytes, remainder := new(big.Int).QuoRem(size.Num(), size.Denom(), new(big.Int))
	if remainder.Sign() != 0 {
		bytes.Add(bytes, big.NewInt(1))
	}
	if !bytes.IsInt64() {
		return 0, fmt.Errorf("larger than CSI can carry (%d bytes at most)", int64(math.MaxInt64))
	}
	return bytes.Int64(), nil
}

// quantitySuffix is the base and exponent a quantity's suffix stands for:
// one of sizeSuffixes, or e or E and a decimal exponent ("1e9"; "1E" alone
// is an exabyte).
func quantitySuffix(suffix string) (base, exponent int64, err error) {
	if known, ok := sizeSuffixes[suffix]; ok {
		return known.base, known.exponent, nil
	}
	if len(suffix) > 1 && (suffix[0] == 'e' || suffix[0] == 'E') {
		exponent, err := strconv.ParseInt(suffix[1:], 10, 32)
		// A larger exponent gives no size CSI can carry, and a smaller one
		// none but a byte: refuse both rather than compute them.
		if err == nil && exponent >= -1000 && exponent <= 1000 {
			return 10, exponent, nil
		}
	}
	return 0, 0, fmt.Errorf("unknown suffix %q: want %s", suffix, sizeHelp)
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
