//! Synthetic, deterministic data for the read endpoints: any id exists, and the same id
//! always gives the same object, on every run and whatever the fault seed.
//!
//! Each object is derived from its own id only (a hash of the kind and the id seeds a
//! generator), so relations between objects are plausible but not consistent: the orders
//! listed for a customer name that customer, while `GET /v1/orders/{id}` of one of them
//! derives its own customer from the order id. Updates (a ticket's status, a customer's
//! address) are kept by the server and laid over these objects.

use serde_json::{Value, json};

use crate::rng::Rng;

/// A fixed epoch for synthetic timestamps (2025-01-01), so objects don't change with time.
const EPOCH_MS: i64 = 1_735_689_600_000;
/// Synthetic objects were created within this span before [`EPOCH_MS`] (one year).
const HISTORY_MS: u64 = 365 * 24 * 60 * 60 * 1000;
/// Most help articles one search returns.
pub const HELP_RESULTS_MAX: usize = 5;

/// The generator for one object: FNV-1a of `kind:id`.
fn rng_for(kind: &str, id: &str) -> Rng {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in kind.bytes().chain([b':']).chain(id.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    Rng::new(hash)
}

fn pick<'a>(rng: &mut Rng, choices: &[&'a str]) -> &'a str {
    choices[rng.below(choices.len() as u64) as usize]
}

fn created_ms(rng: &mut Rng) -> i64 {
    EPOCH_MS - rng.below(HISTORY_MS) as i64
}

/// Cents as a decimal string with two places.
fn money(cents: u64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

fn short_id(rng: &mut Rng, prefix: &str) -> String {
    format!("{prefix}{:08x}", rng.next_u64() as u32)
}

pub fn order(id: &str) -> Value {
    let mut rng = rng_for("order", id);
    order_from(&mut rng, id, None)
}

fn order_from(rng: &mut Rng, id: &str, customer_id: Option<&str>) -> Value {
    let customer_id = customer_id.map_or_else(|| short_id(rng, "cus_"), str::to_owned);
    let lines = 1 + rng.below(3);
    let mut total = 0;
    let items: Vec<Value> = (0..lines)
        .map(|_| {
            let product_id = short_id(rng, "prod_");
            let quantity = 1 + rng.below(3);
            let unit_cents = 500 + rng.below(20_000);
            total += quantity * unit_cents;
            json!({"product_id": product_id, "quantity": quantity, "unit_amount": money(unit_cents)})
        })
        .collect();
    let status = pick(
        rng,
        &["paid", "shipped", "delivered", "delivered", "cancelled"],
    );
    json!({
        "id": id,
        "object": "order",
        "customer_id": customer_id,
        "amount": money(total),
        "currency": "usd",
        "status": status,
        "items": items,
        "shipment_id": short_id(rng, "shp_"),
        "created_ms": created_ms(rng),
    })
}

/// The customer, with the address given by an update if there was one.
pub fn customer(id: &str, address: Option<&Value>) -> Value {
    let mut rng = rng_for("customer", id);
    let first = pick(
        &mut rng,
        &[
            "Ada", "Grace", "Alan", "Edsger", "Barbara", "Ken", "Frances", "Donald",
        ],
    );
    let last = pick(
        &mut rng,
        &[
            "Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Thompson", "Allen", "Knuth",
        ],
    );
    let street = 1 + rng.below(999);
    let city = pick(
        &mut rng,
        &["Lisbon", "Leeds", "Lyon", "Leipzig", "Lima", "Lagos"],
    );
    let default_address = json!({
        "line1": format!("{street} {} Street", pick(&mut rng, &["Main", "High", "Station", "Mill"])),
        "city": city,
        "postal_code": format!("{:05}", rng.below(100_000)),
        "country": pick(&mut rng, &["PT", "GB", "FR", "DE", "PE", "NG"]),
    });
    json!({
        "id": id,
        "object": "customer",
        "name": format!("{first} {last}"),
        "email": format!("{}.{}@example.com", first.to_lowercase(), last.to_lowercase()),
        "address": address.cloned().unwrap_or(default_address),
        "created_ms": created_ms(&mut rng),
    })
}

/// A customer's orders, newest first.
pub fn customer_orders(customer_id: &str) -> Vec<Value> {
    let mut rng = rng_for("customer_orders", customer_id);
    let count = 1 + rng.below(5);
    let mut orders: Vec<Value> = (0..count)
        .map(|_| {
            let id = short_id(&mut rng, "ord_");
            order_from(&mut rng, &id, Some(customer_id))
        })
        .collect();
    orders.sort_by_key(|order| std::cmp::Reverse(order["created_ms"].as_i64()));
    orders
}

pub fn payment_methods(customer_id: &str) -> Vec<Value> {
    let mut rng = rng_for("payment_methods", customer_id);
    let count = 1 + rng.below(3);
    (0..count)
        .map(|_| {
            json!({
                "id": short_id(&mut rng, "pm_"),
                "object": "payment_method",
                "customer_id": customer_id,
                "brand": pick(&mut rng, &["visa", "mastercard", "amex"]),
                "last4": format!("{:04}", rng.below(10_000)),
                "exp_month": 1 + rng.below(12),
                "exp_year": 2026 + rng.below(6),
            })
        })
        .collect()
}

pub fn product(id: &str) -> Value {
    let mut rng = rng_for("product", id);
    let adjective = pick(
        &mut rng,
        &["Classic", "Compact", "Deluxe", "Travel", "Everyday"],
    );
    let noun = pick(
        &mut rng,
        &[
            "Kettle",
            "Backpack",
            "Lamp",
            "Headphones",
            "Notebook",
            "Mug",
        ],
    );
    json!({
        "id": id,
        "object": "product",
        "name": format!("{adjective} {noun}"),
        "price": money(500 + rng.below(20_000)),
        "currency": "usd",
        "in_stock": rng.chance(800),
    })
}

pub fn shipment(id: &str) -> Value {
    let mut rng = rng_for("shipment", id);
    let statuses = [
        "label_created",
        "in_transit",
        "out_for_delivery",
        "delivered",
    ];
    let reached = rng.below(statuses.len() as u64) as usize;
    let mut at_ms = created_ms(&mut rng);
    let events: Vec<Value> = statuses[..=reached]
        .iter()
        .map(|status| {
            at_ms += (6 + rng.below(40)) as i64 * 60 * 60 * 1000;
            json!({"status": status, "at_ms": at_ms})
        })
        .collect();
    json!({
        "id": id,
        "object": "shipment",
        "carrier": pick(&mut rng, &["UPS", "DHL", "La Poste", "Royal Mail"]),
        "tracking_number": format!("1Z{:016}", rng.below(10_000_000_000_000_000)),
        "status": statuses[reached],
        "events": events,
    })
}

/// Statuses a ticket may have (and `PUT /v1/tickets/{id}/status` may set).
pub const TICKET_STATUSES: [&str; 4] = ["open", "pending", "solved", "closed"];

/// The ticket, with the status given by an update if there was one.
pub fn ticket(id: &str, status: Option<&str>) -> Value {
    let mut rng = rng_for("ticket", id);
    let subject = pick(
        &mut rng,
        &[
            "Where is my refund?",
            "I was charged twice",
            "Package never arrived",
            "Change my delivery address",
            "Wrong size received",
        ],
    );
    let drawn = pick(&mut rng, &TICKET_STATUSES);
    json!({
        "id": id,
        "object": "ticket",
        "subject": subject,
        "status": status.unwrap_or(drawn),
        "priority": pick(&mut rng, &["low", "normal", "high", "urgent"]),
        "customer_id": short_id(&mut rng, "cus_"),
        "created_ms": created_ms(&mut rng),
    })
}

/// The help centre: a fixed set of articles.
const ARTICLES: [(&str, &str, &str); 8] = [
    (
        "art_refunds",
        "How refunds work",
        "Refunds go back to the original payment method within 5 to 10 business days. A refund is issued once per order line.",
    ),
    (
        "art_refund_status",
        "Checking the status of a refund",
        "Open the order and look at its refunds; a pending refund is still being processed by the bank.",
    ),
    (
        "art_double_charge",
        "I was charged twice",
        "A second charge is usually an authorisation hold that disappears within days. Contact support if it settles.",
    ),
    (
        "art_shipping",
        "Shipping times",
        "Orders ship within two business days; tracking appears once the carrier scans the parcel.",
    ),
    (
        "art_address",
        "Changing a delivery address",
        "An address can be changed until the order ships. Update it on the customer's profile.",
    ),
    (
        "art_returns",
        "Returning an item",
        "Items can be returned within 30 days in their original packaging for a full refund.",
    ),
    (
        "art_payment_methods",
        "Managing payment methods",
        "Cards can be added or removed from the account; the default card is charged for new orders.",
    ),
    (
        "art_cancel",
        "Cancelling an order",
        "An order can be cancelled until it ships; the charge is then refunded in full.",
    ),
];

/// Articles whose title or body contains any word of the query, best first (most words
/// matched, then the fixed order), at most [`HELP_RESULTS_MAX`].
pub fn help_articles(query: &str) -> Vec<Value> {
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| word.len() > 2)
        .map(str::to_lowercase)
        .collect();
    let mut scored: Vec<(usize, usize)> = ARTICLES
        .iter()
        .enumerate()
        .map(|(position, (_, title, body))| {
            let text = format!("{title} {body}").to_lowercase();
            let score = words
                .iter()
                .filter(|word| text.contains(word.as_str()))
                .count();
            (score, position)
        })
        .filter(|(score, _)| *score > 0)
        .collect();
    scored.sort_by_key(|(score, position)| (std::cmp::Reverse(*score), *position));
    scored
        .into_iter()
        .take(HELP_RESULTS_MAX)
        .map(|(_, position)| {
            let (id, title, body) = ARTICLES[position];
            json!({"id": id, "object": "help_article", "title": title, "body": body})
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_id_gives_the_same_object_and_others_differ() {
        assert_eq!(order("o1"), order("o1"));
        assert_ne!(order("o1"), order("o2"));
        assert_eq!(customer("c1", None), customer("c1", None));
        assert_eq!(customer_orders("c1"), customer_orders("c1"));
        for order in customer_orders("c1") {
            assert_eq!(order["customer_id"], "c1");
        }
        assert_eq!(shipment("s1"), shipment("s1"));
        assert_eq!(ticket("t1", Some("solved"))["status"], "solved");
    }

    #[test]
    fn order_amounts_are_the_sum_of_their_lines() {
        let order = order("o42");
        let cents: u64 = order["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| {
                let unit = item["unit_amount"].as_str().unwrap().replace('.', "");
                item["quantity"].as_u64().unwrap() * unit.parse::<u64>().unwrap()
            })
            .sum();
        assert_eq!(order["amount"], money(cents));
    }

    #[test]
    fn help_search_ranks_by_words_matched() {
        let found = help_articles("refund status");
        assert_eq!(found[0]["id"], "art_refund_status");
        assert!(found.len() <= HELP_RESULTS_MAX);
        assert!(help_articles("xyzzy").is_empty());
    }
}
