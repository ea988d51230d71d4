//! A program of a project outside the tree: a group, a reservation, a charge, everything given
//! back and drained: memory.current is 0. Prints "consumer: ok".
use memcg::{flags, Controller, OomPolicy, Priority, Reservation};

fn main() -> memcg::Result<()> {
    assert!(memcg::compatible(), "library {}", memcg::library_version());
    let ctl = Controller::new()?;
    let tenant = ctl.create_group("tenant")?;
    tenant.write("memory.max", "64M")?;
    {
        let mut r = Reservation::on_group(&tenant, OomPolicy::Never, Priority::Default)?;
        r.reserve(4 << 20)?;
        tenant.charge(8 << 10, flags::DEFAULT)?;
        tenant.uncharge(8 << 10);
    }
    ctl.drain()?;
    let current = tenant.read("memory.current")?;
    assert_eq!(current.trim(), "0", "memory.current after drain");
    println!("consumer: ok (libmemcg {})", memcg::library_version());
    Ok(())
}
