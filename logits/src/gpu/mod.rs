//! The GPU backend: WGSL compute shaders through wgpu (Vulkan, Metal,
//! DX12), in f64 so that its numbers are the CPU's.
//!
//! What runs where, and why:
//! * softmax of logit rows (temperature included) runs on the GPU, one
//!   workgroup per row (`softmax.wgsl`); top-k and top-p are then applied on
//!   the CPU by mdsd-core, exactly as [`crate::CpuBackend`] applies them
//!   after its own softmax. Probability rows are only renormalised, which is
//!   a copy: they stay on the CPU, where a transfer would cost more.
//! * alpha* for i.i.d. drafts: the pass over the vocabulary (each token's
//!   ratio bucket and the masses per bucket, then the tokens of the
//!   candidate buckets) runs on the GPU (`ratio_buckets.wgsl`); the few
//!   thousand bucket sums and few hundred candidates are finished on the
//!   CPU by [`mdsd_bounds::optimal_acceptance_iid_from_buckets`], the same
//!   code as the CPU's bucket selection.
//! * alpha* without replacement (a quadrature per prefix) runs on the CPU.
//!
//! The shaders need 64-bit floats and integers (`SHADER_F64`,
//! `SHADER_INT64`: Vulkan and DX12 GPUs, and Mesa's lavapipe; not Metal).
//! An adapter without them, or no adapter, is a [`LogitsError::Gpu`].

use std::sync::mpsc;

use mdsd_bounds::{
    RATIO_BUCKETS, RatioBucketMasses, optimal_acceptance_iid_from_buckets,
    optimal_acceptance_iid_many,
};
use mdsd_core::{CoreError, Distribution, Transform};
use rayon::prelude::*;
use wgpu::util::DeviceExt;

use crate::backend::{check_batch, distribution_rows, row_distribution};
use crate::{Backend, CpuBackend, LogitsError, Matrix, Values};

/// Threads per workgroup in both shaders.
const THREADS: u32 = 256;
/// Room for candidate tokens per row. Candidate buckets hold a few hundred
/// tokens on real rows; a row with more is finished on the CPU.
const CANDIDATE_CAPACITY: u32 = 16384;
/// Rows per dispatch at most (more rows only cost buffer memory).
const MAX_ROWS_PER_BATCH: usize = 64;

/// Batched rows on a GPU through wgpu. [`WgpuBackend::new`] picks the
/// adapter (`WGPU_ADAPTER_NAME` and `WGPU_BACKEND` choose among several).
pub struct WgpuBackend {
    device: wgpu::Device,
    queue: wgpu::Queue,
    adapter: String,
    softmax: wgpu::ComputePipeline,
    bucket_masses: wgpu::ComputePipeline,
    gather_candidates: wgpu::ComputePipeline,
    /// The largest storage buffer binding, in bytes.
    max_binding: u64,
}

impl std::fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuBackend")
            .field("adapter", &self.adapter)
            .finish_non_exhaustive()
    }
}

impl WgpuBackend {
    /// The default (or environment-chosen) adapter with 64-bit shader
    /// support, and the compiled shaders.
    pub fn new() -> Result<Self, LogitsError> {
        pollster::block_on(Self::create())
    }

    async fn create() -> Result<Self, LogitsError> {
        // Vulkan, Metal and DX12 only (unless WGPU_BACKEND says otherwise): GL
        // has no f64, and probing it prints display-server noise.
        let instance = wgpu::Instance::new(&wgpu::InstanceDescriptor {
            backends: wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY),
            ..wgpu::InstanceDescriptor::from_env_or_default()
        });
        let adapter = wgpu::util::initialize_adapter_from_env_or_default(&instance, None)
            .await
            .map_err(|e| LogitsError::Gpu(format!("no adapter: {e}")))?;
        let info = adapter.get_info();
        let name = format!("{} ({:?})", info.name, info.backend);
        let needed = wgpu::Features::SHADER_F64 | wgpu::Features::SHADER_INT64;
        let missing: Vec<&str> = [
            (wgpu::Features::SHADER_F64, "64-bit floats (SHADER_F64)"),
            (
                wgpu::Features::SHADER_INT64,
                "64-bit integers (SHADER_INT64)",
            ),
        ]
        .into_iter()
        .filter(|&(feature, _)| !adapter.features().contains(feature))
        .map(|(_, what)| what)
        .collect();
        if !missing.is_empty() {
            return Err(LogitsError::Gpu(format!(
                "adapter {name} has no {} in shaders, which the GPU backend computes with",
                missing.join(" and ")
            )));
        }
        let limits = adapter.limits();
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("mdsd"),
                required_features: needed,
                required_limits: limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| LogitsError::Gpu(format!("adapter {name}: {e}")))?;

        device.push_error_scope(wgpu::ErrorFilter::Validation);
        let pipeline = |source: &str, entry: &str| {
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(entry),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        let softmax = pipeline(include_str!("softmax.wgsl"), "softmax");
        let buckets = include_str!("ratio_buckets.wgsl");
        let bucket_masses = pipeline(buckets, "bucket_masses");
        let gather_candidates = pipeline(buckets, "gather_candidates");
        if let Some(error) = device.pop_error_scope().await {
            return Err(LogitsError::Gpu(format!(
                "adapter {name}: shaders: {error}"
            )));
        }
        Ok(Self {
            device,
            queue,
            adapter: name,
            softmax,
            bucket_masses,
            gather_candidates,
            max_binding: u64::from(limits.max_storage_buffer_binding_size)
                .min(limits.max_buffer_size),
        })
    }

    /// The adapter's name and graphics API, for reports.
    pub fn adapter(&self) -> &str {
        &self.adapter
    }

    /// How many rows of `cols` f64 one dispatch takes.
    fn rows_per_batch(&self, cols: usize) -> Result<usize, LogitsError> {
        let row_bytes = (cols as u64).max(1) * 8;
        let rows = (self.max_binding / row_bytes).min(MAX_ROWS_PER_BATCH as u64) as usize;
        if rows == 0 || cols as u64 >= u64::from(u32::MAX) {
            return Err(LogitsError::Gpu(format!(
                "a row of {cols} f64 exceeds the adapter's largest buffer ({} bytes)",
                self.max_binding
            )));
        }
        Ok(rows)
    }

    fn storage(&self, label: &str, contents: &[u8]) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            })
    }

    fn scratch(&self, label: &str, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(4),
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    fn bind(
        &self,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[(u32, &wgpu::Buffer)],
    ) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .map(|&(binding, buffer)| wgpu::BindGroupEntry {
                binding,
                resource: buffer.as_entire_binding(),
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    /// Runs `record` in one submission and reads `outputs` back, each as
    /// u32 words. GPU errors (out of memory, validation) are caught here.
    fn submit_and_read(
        &self,
        record: impl FnOnce(&mut wgpu::CommandEncoder),
        outputs: &[&wgpu::Buffer],
    ) -> Result<Vec<Vec<u8>>, LogitsError> {
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        record(&mut encoder);
        let staging: Vec<wgpu::Buffer> = outputs
            .iter()
            .map(|buffer| {
                let copy = self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("read back"),
                    size: buffer.size(),
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                encoder.copy_buffer_to_buffer(buffer, 0, &copy, 0, buffer.size());
                copy
            })
            .collect();
        self.queue.submit([encoder.finish()]);
        let (sender, receiver) = mpsc::channel();
        for (i, buffer) in staging.iter().enumerate() {
            let sender = sender.clone();
            buffer
                .slice(..)
                .map_async(wgpu::MapMode::Read, move |result| {
                    let _ = sender.send((i, result));
                });
        }
        drop(sender);
        self.device
            .poll(wgpu::PollType::Wait)
            .map_err(|e| LogitsError::Gpu(format!("waiting for the GPU: {e}")))?;
        for (i, result) in receiver {
            result.map_err(|e| LogitsError::Gpu(format!("reading result {i} back: {e}")))?;
        }
        Ok(staging
            .iter()
            .map(|buffer| {
                let bytes = buffer.slice(..).get_mapped_range().to_vec();
                buffer.unmap();
                bytes
            })
            .collect())
    }

    /// Catches the GPU errors of `work` (out of memory, validation) as a
    /// [`LogitsError::Gpu`] instead of wgpu's default panic.
    fn guarded<T>(&self, work: impl FnOnce() -> Result<T, LogitsError>) -> Result<T, LogitsError> {
        self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let out = work();
        let validation = pollster::block_on(self.device.pop_error_scope());
        let memory = pollster::block_on(self.device.pop_error_scope());
        if let Some(error) = validation.or(memory) {
            return Err(LogitsError::Gpu(format!("{}: {error}", self.adapter)));
        }
        out
    }

    /// Softmax of `rows` at `temperature` on the GPU, rows in order.
    fn softmax_rows(&self, rows: &Matrix, temperature: f64) -> Result<Vec<Vec<f64>>, LogitsError> {
        let cols = rows.cols();
        let mut out = Vec::with_capacity(rows.rows());
        for first in (0..rows.rows()).step_by(self.rows_per_batch(cols)?) {
            let count = (rows.rows() - first).min(self.rows_per_batch(cols)?);
            let values = &rows.as_slice()[first * cols..(first + count) * cols];
            let (probs, status) = self.guarded(|| {
                let mut params = [0u8; 16];
                params[..4].copy_from_slice(&(cols as u32).to_le_bytes());
                params[8..].copy_from_slice(&temperature.to_le_bytes());
                let params = self
                    .device
                    .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                        label: Some("softmax params"),
                        contents: &params,
                        usage: wgpu::BufferUsages::UNIFORM,
                    });
                let logits = self.storage("logits", bytemuck::cast_slice(values));
                let probs = self.scratch("probs", (values.len() * 8) as u64);
                let status = self.scratch("status", (count * 8) as u64);
                let group = self.bind(
                    &self.softmax,
                    &[(0, &params), (1, &logits), (2, &probs), (3, &status)],
                );
                let mut read = self.submit_and_read(
                    |encoder| {
                        let mut pass = encoder.begin_compute_pass(&Default::default());
                        pass.set_pipeline(&self.softmax);
                        pass.set_bind_group(0, &group, &[]);
                        pass.dispatch_workgroups(count as u32, 1, 1);
                    },
                    &[&probs, &status],
                )?;
                let status = read.pop().unwrap_or_default();
                let probs = read.pop().unwrap_or_default();
                Ok((probs, status))
            })?;
            let probs: &[f64] = bytemuck::cast_slice(&probs);
            let status: &[[u32; 2]] = bytemuck::cast_slice(&status);
            for (r, (row, &[code, index])) in
                probs.chunks_exact(cols.max(1)).zip(status).enumerate()
            {
                let at = first + r;
                let error = match code {
                    0 => None,
                    1 => Some(CoreError::BadLogit {
                        index: index as usize,
                        value: rows.row(at)[index as usize],
                    }),
                    _ => Some(CoreError::NoFiniteLogit),
                };
                if let Some(source) = error {
                    return Err(LogitsError::InvalidRow {
                        what: "input",
                        row: at,
                        source,
                    });
                }
                out.push(row.to_vec());
            }
        }
        Ok(out)
    }

    /// alpha* - the pass over V on the GPU, the rest on the CPU - for the
    /// validated rows `p`, `q`: one batch, from row `first` of the input.
    fn iid_batch(
        &self,
        first: usize,
        p: &[Distribution],
        q: &[Distribution],
        ns: &[usize],
    ) -> Result<Vec<Vec<f64>>, LogitsError> {
        let rows = p.len();
        let cols = p[0].len();
        let flat = |d: &[Distribution]| -> Vec<f64> {
            d.iter().flat_map(|x| x.probs().iter().copied()).collect()
        };
        let buckets = RATIO_BUCKETS as u64;
        let groups = (cols as u32).div_ceil(THREADS);
        self.guarded(|| {
            let mut params = [0u8; 8];
            params[..4].copy_from_slice(&(cols as u32).to_le_bytes());
            params[4..].copy_from_slice(&CANDIDATE_CAPACITY.to_le_bytes());
            let params = self
                .device
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some("bucket params"),
                    contents: &params,
                    usage: wgpu::BufferUsages::UNIFORM,
                });
            let target = self.storage("target", bytemuck::cast_slice(&flat(p)));
            let draft = self.storage("draft", bytemuck::cast_slice(&flat(q)));
            let keys = self.scratch("keys", (rows * cols * 4) as u64);
            let masses = self.scratch("bucket masses", rows as u64 * buckets * 16);
            let group = self.bind(
                &self.bucket_masses,
                &[
                    (0, &params),
                    (1, &target),
                    (2, &draft),
                    (3, &keys),
                    (4, &masses),
                ],
            );
            let read = self.submit_and_read(
                |encoder| {
                    let mut pass = encoder.begin_compute_pass(&Default::default());
                    pass.set_pipeline(&self.bucket_masses);
                    pass.set_bind_group(0, &group, &[]);
                    pass.dispatch_workgroups(groups, rows as u32, 1);
                },
                &[&masses],
            )?;
            let words: &[u32] = bytemuck::cast_slice(&read[0]);
            let masses: Vec<RatioBucketMasses> = words
                .chunks_exact(RATIO_BUCKETS * 4)
                .map(|row| {
                    let fixed = |lo: u32, hi: u32| {
                        ((u64::from(hi) << 32) | u64::from(lo)) as f64 * FIXED_UNIT
                    };
                    let (mp, mq) = row
                        .chunks_exact(4)
                        .map(|w| (fixed(w[0], w[1]), fixed(w[2], w[3])))
                        .unzip();
                    RatioBucketMasses::new(mp, mq)
                })
                .collect::<Result<_, _>>()
                .map_err(|e| LogitsError::Gpu(format!("bucket masses: {e}")))?;
            let wanted: Vec<u32> = masses
                .iter()
                .map(|m| m.candidate_buckets(ns))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|source| LogitsError::Bound { row: first, source })?
                .into_iter()
                .flatten()
                .map(u32::from)
                .collect();

            let found = self.scratch("found", (rows * 4) as u64);
            let candidates = self.scratch(
                "candidates",
                rows as u64 * u64::from(CANDIDATE_CAPACITY) * 8,
            );
            let read = if wanted.contains(&1) {
                let wanted = self.storage("wanted", bytemuck::cast_slice(&wanted));
                let group = self.bind(
                    &self.gather_candidates,
                    &[
                        (0, &params),
                        (3, &keys),
                        (5, &wanted),
                        (6, &found),
                        (7, &candidates),
                    ],
                );
                self.submit_and_read(
                    |encoder| {
                        let mut pass = encoder.begin_compute_pass(&Default::default());
                        pass.set_pipeline(&self.gather_candidates);
                        pass.set_bind_group(0, &group, &[]);
                        pass.dispatch_workgroups(groups, rows as u32, 1);
                    },
                    &[&found, &candidates],
                )?
            } else {
                vec![vec![0; rows * 4], Vec::new()]
            };
            let found: &[u32] = bytemuck::cast_slice(&read[0]);
            let slots: &[[u32; 2]] = bytemuck::cast_slice(&read[1]);
            (0..rows)
                .into_par_iter()
                .map(|r| {
                    let bound = if found[r] > CANDIDATE_CAPACITY {
                        optimal_acceptance_iid_many(&p[r], &q[r], ns)
                    } else {
                        let start = r * CANDIDATE_CAPACITY as usize;
                        let given: Vec<(usize, usize)> = slots[start..start + found[r] as usize]
                            .iter()
                            .map(|&[t, b]| (t as usize, b as usize))
                            .collect();
                        optimal_acceptance_iid_from_buckets(&p[r], &q[r], &masses[r], ns, &given)
                    };
                    bound.map_err(|source| LogitsError::Bound {
                        row: first + r,
                        source,
                    })
                })
                .collect()
        })
    }
}

/// The value of one unit of the shaders' fixed point, 2^-62.
const FIXED_UNIT: f64 = 1.0 / (1u64 << 62) as f64;

impl Backend for WgpuBackend {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn distributions(
        &self,
        rows: &Matrix,
        values: Values,
        transform: &Transform,
    ) -> Result<Matrix, LogitsError> {
        if values == Values::Probabilities {
            return CpuBackend.distributions(rows, values, transform);
        }
        let temperature = transform.temperature.unwrap_or(1.0);
        if !temperature.is_finite() || temperature < 0.0 {
            return Err(LogitsError::InvalidRow {
                what: "input",
                row: 0,
                source: CoreError::InvalidTemperature(temperature),
            });
        }
        let softmax = self.softmax_rows(rows, temperature)?;
        let rest = Transform {
            temperature: None,
            ..*transform
        };
        if rest.is_identity() {
            return Matrix::new(rows.rows(), rows.cols(), softmax.concat());
        }
        // Top-k and top-p on the CPU, as the CPU backend applies them.
        distribution_rows(rows.rows(), rows.cols(), |r| {
            Values::Probabilities.distribution(&softmax[r], &rest)
        })
    }

    fn optimal_acceptance_iid(
        &self,
        target: &Matrix,
        draft: &Matrix,
        ns: &[usize],
    ) -> Result<Matrix, LogitsError> {
        check_batch(target, draft)?;
        if ns.contains(&0) {
            return Err(LogitsError::Bound {
                row: 0,
                source: CoreError::NoDrafts.into(),
            });
        }
        let mut out = Vec::with_capacity(target.rows() * ns.len());
        if target.rows() > 0 {
            let batch = self.rows_per_batch(target.cols())?;
            for first in (0..target.rows()).step_by(batch) {
                let rows = first..(first + batch).min(target.rows());
                let (p, q): (Vec<Distribution>, Vec<Distribution>) = rows
                    .into_par_iter()
                    .map(|r| {
                        Ok((
                            row_distribution("target", r, target.row(r))?,
                            row_distribution("draft", r, draft.row(r))?,
                        ))
                    })
                    .collect::<Result<Vec<_>, LogitsError>>()?
                    .into_iter()
                    .unzip();
                out.extend(self.iid_batch(first, &p, &q, ns)?.into_iter().flatten());
            }
        }
        Matrix::new(target.rows(), ns.len(), out)
    }

    fn optimal_acceptance_wor(
        &self,
        target: &Matrix,
        draft: &Matrix,
        ns: &[usize],
    ) -> Result<Matrix, LogitsError> {
        CpuBackend.optimal_acceptance_wor(target, draft, ns)
    }
}
