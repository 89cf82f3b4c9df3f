/**
 * JSON without floats: amounts and keys stay exact on the way in and on the way out.
 *
 * JavaScript has one number type, a binary float, so an amount that passes through a
 * `number` may already differ from the one the caller meant (`0.1 + 0.2`). The rules:
 *
 * - Out (arguments, results): strings, booleans, `null`, safe integers, `bigint`s, arrays
 *   and plain objects. A number with a fraction, a non-finite number or an integer beyond
 *   `Number.MAX_SAFE_INTEGER` is refused with a `TypeError` naming its place, before
 *   anything is sent: pass amounts as decimal strings (`"49.00"`), as the gateway's tool
 *   schemas take them. A `bigint` is written as a JSON integer. An object member whose
 *   value is `undefined` is left out (an optional argument not given); anything else JSON
 *   can't carry (a function, a symbol, a `Date`, a `Map`) is refused.
 * - In (the gateway's answers): a number with a fraction or an exponent, or an integer
 *   beyond `Number.MAX_SAFE_INTEGER`, is read as its exact text, a string. Safe integers
 *   (ids, counts, times in milliseconds) are numbers.
 *
 * @module
 */

/** A JSON value as this client reads and writes it. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** What `toJsonValue` takes: JSON values, `bigint`s, and `undefined` members of objects. */
export type JsonInput =
  | null
  | boolean
  | number
  | bigint
  | string
  | undefined
  | readonly JsonInput[]
  | { readonly [key: string]: JsonInput };

function isPlainObject(value: object): boolean {
  const prototype: unknown = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

/**
 * `value` as plain JSON values. Throws `TypeError` naming the place (`arguments.amount`)
 * of a float, of an unsafe integer or of anything else JSON can't carry exactly.
 */
export function toJsonValue(value: unknown, path = "$"): JsonValue {
  if (value === null || typeof value === "boolean" || typeof value === "string") {
    return value;
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) {
      throw new TypeError(`${path} is ${value}, not a finite number`);
    }
    if (!Number.isInteger(value)) {
      throw new TypeError(
        `${path} is a float (${value}); pass amounts as decimal strings ("49.00"), never as numbers with a fraction, so they stay exact`,
      );
    }
    if (!Number.isSafeInteger(value)) {
      throw new TypeError(`${path} is ${value}, beyond the integers a number holds exactly; pass it as a bigint or a string`);
    }
    return value;
  }
  if (typeof value === "bigint") {
    // Written as a JSON integer by `stringify`; held as its text until then.
    return new RawInteger(value) as unknown as JsonValue;
  }
  if (Array.isArray(value)) {
    return value.map((item: unknown, index) => {
      if (item === undefined) {
        throw new TypeError(`${path}[${index}] is undefined, which JSON can't carry`);
      }
      return toJsonValue(item, `${path}[${index}]`);
    });
  }
  if (typeof value === "object" && isPlainObject(value)) {
    const result: { [key: string]: JsonValue } = {};
    for (const [key, item] of Object.entries(value)) {
      if (item !== undefined) {
        result[key] = toJsonValue(item, `${path}.${key}`);
      }
    }
    return result;
  }
  const kind = typeof value === "object" ? (value.constructor?.name ?? "object") : typeof value;
  throw new TypeError(`${path} is a ${kind}, which JSON can't carry`);
}

/** A `bigint` on its way out, written as the integer it is. */
class RawInteger {
  constructor(readonly value: bigint) {}
}

/** How a `bigint` is written by `JSON.stringify` before it is turned into an integer: a
 * string starting with a NUL, which `JSON.stringify` escapes as `\u0000`. */
const BIGINT_MARK = "\u0000intentgate-bigint:";

/** The JSON text of `value` (see `toJsonValue`). */
export function stringify(value: unknown): string {
  return JSON.stringify(toJsonValue(value), (_key, item: unknown) =>
    item instanceof RawInteger ? `${BIGINT_MARK}${item.value}` : item,
  ).replace(/"\\u0000intentgate-bigint:(-?[0-9]+)"/g, "$1");
}

/**
 * Parses JSON, reading every number with a fraction or an exponent, and every integer
 * beyond `Number.MAX_SAFE_INTEGER`, as its exact text. Throws `SyntaxError` for text
 * that is not JSON.
 */
export function parse(text: string): JsonValue {
  return JSON.parse(quoteInexactNumbers(text)) as JsonValue;
}

/**
 * `text` with each number `JSON.parse` would round written as a string instead. Numbers
 * are found outside strings only; the scan follows JSON's grammar for strings (escapes
 * included), and `JSON.parse` checks the rest.
 */
function quoteInexactNumbers(text: string): string {
  let out = "";
  let copied = 0;
  let index = 0;
  while (index < text.length) {
    const character = text[index];
    if (character === '"') {
      index += 1;
      while (index < text.length && text[index] !== '"') {
        index += text[index] === "\\" ? 2 : 1;
      }
      index += 1;
      continue;
    }
    if (character === "-" || (character !== undefined && character >= "0" && character <= "9")) {
      const start = index;
      index += 1;
      while (index < text.length && /[0-9eE.+-]/.test(text[index] as string)) {
        index += 1;
      }
      const number = text.slice(start, index);
      if (/[.eE]/.test(number) || !Number.isSafeInteger(Number(number))) {
        out += `${text.slice(copied, start)}"${number}"`;
        copied = index;
      }
      continue;
    }
    index += 1;
  }
  return out + text.slice(copied);
}
