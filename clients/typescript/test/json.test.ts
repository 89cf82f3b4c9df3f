/** Amounts stay exact: floats are refused on the way out, and read as text on the way in. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { parseJson, stringifyJson, toJsonValue } from "intentgate";

test("a float anywhere in a value is refused, naming its place", () => {
  assert.throws(() => toJsonValue({ order: { amount: 49.5 } }, "arguments"), /arguments\.order\.amount is a float/);
  assert.throws(() => toJsonValue([1, 0.1 + 0.2]), /\$\[1\] is a float/);
  assert.throws(() => toJsonValue({ amount: Number.NaN }), /not a finite number/);
  assert.throws(() => toJsonValue({ id: 2 ** 60 }), /beyond the integers a number holds exactly/);
  assert.throws(() => toJsonValue({ at: new Date(0) }), /\$\.at is a Date/);
});

test("strings, safe integers and bigints go out exactly; undefined members are left out", () => {
  assert.equal(stringifyJson({ amount: "49.00", count: 3, big: 12345678901234567890n, note: undefined }), '{"amount":"49.00","count":3,"big":12345678901234567890}');
});

test("numbers a float would round are read as their text", () => {
  assert.deepEqual(parseJson('{"amount": 49.10, "rate": 1e-7, "id": 12345678901234567890, "n": -3, "s": "1.5 \\" 2.5"}'), {
    amount: "49.10",
    rate: "1e-7",
    id: "12345678901234567890",
    n: -3,
    s: '1.5 " 2.5',
  });
  assert.deepEqual(parseJson("[0.1, [2.50]]"), ["0.1", ["2.50"]]);
});
