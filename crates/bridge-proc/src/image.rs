//! The bridge's own loaded image: giving back the pages only loading needed.
//!
//! A position-independent executable carries a table of relative relocations (`.rela.dyn`,
//! about 23,000 entries, 540 kB in the release bridge). The loader reads all of it once, before
//! `main`, to fix the pointers in `.data.rel.ro`; nothing reads it again (the bridge is linked
//! with `-z now`, so no lazy binding, and it opens no shared object of its own). Its pages stay
//! resident all the same, a tenth of a cold start's memory. [`release_loader_tables`] drops them
//! with `madvise(MADV_DONTNEED)`. [`release_load_time_code`] does the same for the code of libm
//! and libgcc_s, which the loader ran (libm's variant resolvers, 64 kB of fault-around each) and
//! the bridge seldom or never runs again.
//!
//! Why it is safe: only whole pages are given back, and only of segments mapped from their file
//! and never written: the executable's table in a segment without `PF_W`, the libraries'
//! executable segments (`PF_X` without `PF_W`, and no text relocations). Dropping such pages
//! loses nothing; whatever reads or runs them again has the kernel read them back from the file
//! (which cannot be written while it is mapped to run). Everything is read from the program
//! headers the loader keeps (`AT_PHDR`, `dl_iterate_phdr`); nothing is opened.
//!
//! One of the workspace's modules with `unsafe` code (with [`crate::sched`] and the fence's
//! `pre_exec`): reading those program headers and dynamic sections, and `madvise`.

#![allow(unsafe_code)]

use nix::libc;

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_PHDR: u32 = 6;
const PF_W: u32 = 2;
const PF_X: u32 = 1;
const DT_NULL: i64 = 0;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_RELRSZ: i64 = 35;
const DT_RELR: i64 = 36;

/// `Elf64_Phdr`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Phdr {
    p_type: u32,
    p_flags: u32,
    p_offset: u64,
    p_vaddr: u64,
    p_paddr: u64,
    p_filesz: u64,
    p_memsz: u64,
    p_align: u64,
}

/// `Elf64_Dyn`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Dyn {
    d_tag: i64,
    d_val: u64,
}

/// What [`release_loader_tables`] gave back, in bytes (0 when there was nothing to give back,
/// e.g. a static or non-PIE build, or a table sharing every page with other data).
pub fn release_loader_tables() -> usize {
    let Some(image) = Image::current() else {
        return 0;
    };
    let mut released = 0;
    for (first, end) in image.releasable(page_size()) {
        // SAFETY: [first, end) lies whole inside a PT_LOAD segment of this executable mapped
        // without write permission (checked in `releasable`), so the pages hold the file's
        // bytes and no Rust object lives in them; MADV_DONTNEED only drops them from the page
        // tables, and a later read would fault them back in from the file.
        let rc =
            unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_DONTNEED) };
        if rc == 0 {
            released += end - first;
        }
    }
    released
}

/// Shared objects whose code runs while the process is loaded and seldom after: libm (at load
/// the loader runs its resolvers, which choose each function's variant for this CPU, four
/// 64 kB windows of its code; the bridge calls four of its functions, rarely) and libgcc_s
/// (unwinding, for a panic's backtrace). Not the loader itself: every new thread runs its code.
const LOAD_TIME: [&str; 2] = ["libm.so", "libgcc_s.so"];

/// Gives back the resident code pages of [`LOAD_TIME`] objects (their executable segments,
/// which are never written): the loader's work faulted them in, fault-around 64 kB at a time.
/// What runs later is read back from the file as it runs. Returns the bytes given back.
pub fn release_load_time_code() -> usize {
    let page = page_size();
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr hands a valid info for the call's duration and `data` is the
        // `&mut Vec` passed below; the program headers it points to live as long as the object.
        let (info, ranges) = unsafe { (&*info, &mut *(data as *mut Vec<(usize, usize)>)) };
        if info.dlpi_name.is_null() || info.dlpi_phdr.is_null() {
            return 0;
        }
        // SAFETY: a NUL-terminated name owned by the loader.
        let name = unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes();
        if !LOAD_TIME
            .iter()
            .any(|l| name.windows(l.len()).any(|w| w == l.as_bytes()))
        {
            return 0;
        }
        // SAFETY: dlpi_phnum program headers at dlpi_phdr.
        let phdrs = unsafe {
            std::slice::from_raw_parts(info.dlpi_phdr as *const Phdr, usize::from(info.dlpi_phnum))
        };
        let base = info.dlpi_addr as usize;
        // An object whose code is relocated in place (DT_TEXTREL) has written text pages.
        if textrel(base, phdrs) {
            return 0;
        }
        for p in phdrs {
            if p.p_type == PT_LOAD && p.p_flags & PF_X != 0 && p.p_flags & PF_W == 0 {
                let start = base.wrapping_add(p.p_vaddr as usize);
                ranges.push((start, p.p_filesz as usize));
            }
        }
        0
    }
    let mut found: Vec<(usize, usize)> = Vec::new();
    // SAFETY: the callback only reads what the loader hands it and pushes to `found`.
    unsafe {
        libc::dl_iterate_phdr(Some(each), (&mut found as *mut Vec<(usize, usize)>).cast());
    }
    ranges.extend(
        found
            .into_iter()
            .filter_map(|(start, len)| whole_pages(start, len, page)),
    );
    let mut released = 0;
    for (first, end) in ranges {
        // SAFETY: whole pages of an executable, never-written segment of a shared object mapped
        // from its file (checked in `each`): dropping them loses nothing, a later call faults
        // them back in from the file.
        if unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_DONTNEED) }
            == 0
        {
            released += end - first;
        }
    }
    released
}

/// Whether the object at `base` with these program headers has text relocations.
fn textrel(base: usize, phdrs: &[Phdr]) -> bool {
    const DT_TEXTREL: i64 = 22;
    const DT_FLAGS: i64 = 30;
    const DF_TEXTREL: u64 = 4;
    let Some(d) = phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) else {
        return false;
    };
    let addr = base.wrapping_add(d.p_vaddr as usize);
    let count = d.p_memsz as usize / std::mem::size_of::<Dyn>();
    if !addr.is_multiple_of(8) || count == 0 {
        return true;
    }
    // SAFETY: the object's PT_DYNAMIC, mapped while it is loaded.
    let entries = unsafe { std::slice::from_raw_parts(addr as *const Dyn, count) };
    entries
        .iter()
        .take_while(|e| e.d_tag != DT_NULL)
        .any(|e| e.d_tag == DT_TEXTREL || (e.d_tag == DT_FLAGS && e.d_val & DF_TEXTREL != 0))
}

/// The whole pages of [start, start + len), as a [first, end) range (`None`: not one page).
fn whole_pages(start: usize, len: usize, page: usize) -> Option<(usize, usize)> {
    let first = start.checked_next_multiple_of(page)?;
    let end = start.saturating_add(len) / page * page;
    (end > first).then_some((first, end))
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n)
        .ok()
        .filter(|n| n.is_power_of_two())
        .unwrap_or(4096)
}

/// The running executable's program headers and load bias.
struct Image {
    phdrs: &'static [Phdr],
    bias: usize,
}

impl Image {
    fn current() -> Option<Image> {
        // SAFETY: getauxval has no preconditions; 0 means the entry is absent.
        let (at_phdr, at_phnum) = unsafe {
            (
                libc::getauxval(libc::AT_PHDR) as usize,
                libc::getauxval(libc::AT_PHNUM) as usize,
            )
        };
        if at_phdr == 0 || at_phnum == 0 || at_phnum > 256 || at_phdr % 8 != 0 {
            return None;
        }
        // SAFETY: the kernel maps the executable's program header table at AT_PHDR, AT_PHNUM
        // entries of Elf64_Phdr, for the life of the process; it is never written after exec.
        let phdrs: &'static [Phdr] =
            unsafe { std::slice::from_raw_parts(at_phdr as *const Phdr, at_phnum) };
        // The load bias: where PT_PHDR was asked to be against where it is.
        let phdr = phdrs.iter().find(|p| p.p_type == PT_PHDR)?;
        let bias = at_phdr.checked_sub(usize::try_from(phdr.p_vaddr).ok()?)?;
        Some(Image { phdrs, bias })
    }

    /// The relocation tables named by the dynamic section, as (address, length).
    fn relocation_tables(&self) -> Vec<(usize, usize)> {
        let Some(dynamic) = self.phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) else {
            return Vec::new();
        };
        let Some(addr) = usize::try_from(dynamic.p_vaddr)
            .ok()
            .and_then(|v| v.checked_add(self.bias))
        else {
            return Vec::new();
        };
        let count = usize::try_from(dynamic.p_memsz).unwrap_or(0) / std::mem::size_of::<Dyn>();
        if addr == 0
            || addr % 8 != 0
            || count == 0
            || !self.in_load_segment(addr, addr + count * 16)
        {
            return Vec::new();
        }
        // SAFETY: PT_DYNAMIC lies inside a loaded segment (checked) and holds `count` Elf64_Dyn
        // entries; after relocation it is read-only (RELRO) and nothing writes it again.
        let entries: &[Dyn] = unsafe { std::slice::from_raw_parts(addr as *const Dyn, count) };
        let mut rela = (0, 0);
        let mut relr = (0, 0);
        for e in entries {
            let v = usize::try_from(e.d_val).unwrap_or(0);
            match e.d_tag {
                DT_NULL => break,
                DT_RELA => rela.0 = v,
                DT_RELASZ => rela.1 = v,
                DT_RELR => relr.0 = v,
                DT_RELRSZ => relr.1 = v,
                _ => {}
            }
        }
        [rela, relr]
            .into_iter()
            .filter(|&(a, n)| a != 0 && n != 0)
            .filter_map(|(a, n)| Some((self.absolute(a)?, n)))
            .collect()
    }

    /// glibc rewrites the dynamic section's addresses to absolute ones when it loads a PIE;
    /// another loader may leave them relative to the image: both are taken.
    fn absolute(&self, a: usize) -> Option<usize> {
        if a >= self.bias && self.bias != 0 {
            Some(a)
        } else {
            a.checked_add(self.bias)
        }
    }

    fn in_load_segment(&self, start: usize, end: usize) -> bool {
        self.load_segment(start, end).is_some()
    }

    fn load_segment(&self, start: usize, end: usize) -> Option<&Phdr> {
        self.phdrs.iter().find(|p| {
            let Some(s) = usize::try_from(p.p_vaddr)
                .ok()
                .and_then(|v| v.checked_add(self.bias))
            else {
                return false;
            };
            let Some(e) = usize::try_from(p.p_filesz)
                .ok()
                .and_then(|n| s.checked_add(n))
            else {
                return false;
            };
            p.p_type == PT_LOAD && s <= start && end <= e
        })
    }

    /// The whole pages of the relocation tables that lie in a read-only, file-backed segment,
    /// as [start, end) address ranges.
    fn releasable(&self, page: usize) -> Vec<(usize, usize)> {
        self.relocation_tables()
            .into_iter()
            .filter_map(|(start, len)| whole_pages(start, len, page))
            .filter(|&(first, end)| self.read_only_file_backed(first, end))
            .collect()
    }

    /// Whether [start, end) lies whole in the file-backed part of a segment mapped without
    /// write permission.
    fn read_only_file_backed(&self, start: usize, end: usize) -> bool {
        self.load_segment(start, end)
            .is_some_and(|p| p.p_flags & PF_W == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom};

    /// Whether the page at `addr` is mapped in this process (`/proc/self/pagemap`, bit 63).
    fn present(addr: usize) -> bool {
        let mut f = std::fs::File::open("/proc/self/pagemap").unwrap();
        f.seek(SeekFrom::Start((addr / page_size() * 8) as u64))
            .unwrap();
        let mut entry = [0u8; 8];
        f.read_exact(&mut entry).unwrap();
        u64::from_le_bytes(entry) >> 63 == 1
    }

    #[test]
    fn the_relocation_table_of_a_pie_is_given_back_and_the_process_runs_on() {
        let image = Image::current().expect("program headers of the test binary");
        assert!(image.phdrs.iter().any(|p| p.p_type == PT_LOAD));
        let ranges = image.releasable(page_size());
        // The test binary is a PIE with tens of thousands of relative relocations.
        assert!(
            !ranges.is_empty(),
            "no relocation table found in {:?}",
            image.relocation_tables()
        );
        for &(first, end) in &ranges {
            assert!(image.read_only_file_backed(first, end));
            assert_eq!(first % page_size(), 0);
            // Touch it, so that it is mapped before.
            // SAFETY: inside a loaded read-only segment of this executable.
            let _ = unsafe { std::ptr::read_volatile(first as *const u8) };
            assert!(present(first));
        }
        let released = release_loader_tables();
        assert_eq!(released, ranges.iter().map(|(a, b)| b - a).sum::<usize>());
        for &(first, end) in &ranges {
            assert!(!present(first), "{first:#x} still mapped");
            assert!(!present(end - page_size()), "{end:#x} still mapped");
        }
        // Everything that the relocations fixed still works: formatting goes through vtables
        // and string tables in .data.rel.ro.
        let text = format!(
            "{:?} {}",
            Some(released),
            std::path::Path::new("/x").display()
        );
        assert_eq!(text, format!("Some({released}) /x"));
    }

    #[test]
    fn load_time_code_is_given_back_and_runs_again_when_called() {
        // Keep libm linked and resolved: `ln` of a value the optimizer cannot see is a call.
        let x = std::hint::black_box(std::f64::consts::E);
        assert!((x.ln() - 1.0).abs() < 1e-12);
        let released = release_load_time_code();
        assert!(released > 0, "no code of libm or libgcc_s given back");
        assert_eq!(released % page_size(), 0);
        // Called again, the code is read back from the file.
        let y = std::hint::black_box(std::f64::consts::E * std::f64::consts::E);
        assert!((y.ln() - 2.0).abs() < 1e-12);
    }
}
