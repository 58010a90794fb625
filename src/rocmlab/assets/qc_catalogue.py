"""The defect catalogue the course's QC data sets are written from: product lines, parts and
stations, and each defect's synonyms, measurement phrasing, severity rules, rework step and
root causes (``generate_data.py`` turns it into reports and knowledge-base documents).

Everything here was written for this project.
"""

from __future__ import annotations

SEVERITIES = ["轻微", "一般", "严重", "致命"]
DISPOSITIONS = ["放行", "返工", "让步接收", "报废"]

# product line -> (parts, {location key -> location text}, stations)
PRODUCT_LINES = {
    "PCB 组装": (
        ["主控板", "电源板", "电机驱动板", "显示接口板", "通信模组板"],
        [
            "BGA 区域",
            "电源模块焊盘",
            "USB 接口引脚",
            "QFN 芯片引脚",
            "贴片电容 C12 附近",
            "连接器 J3 引脚",
            "板边金手指",
            "晶振 Y1 焊盘",
        ],
        ["SMT 1 线 AOI", "SMT 2 线 AOI", "回流焊炉后目检", "ICT 测试", "X-ray 抽检", "功能测试 FCT"],
    ),
    "注塑件": (
        ["手机中框", "遥控器前壳", "电池后盖", "充电器外壳", "面板装饰件"],
        ["A 面外观区", "卡扣根部", "螺丝柱", "浇口附近", "分型线", "底壳边缘", "按键孔周边"],
        ["注塑 3 号机", "注塑 7 号机", "注塑 12 号机", "后加工工位", "外观全检线"],
    ),
    "钣金": (
        ["机箱侧板", "服务器托架", "控制柜门板", "安装支架", "电源底板"],
        ["折弯处", "冲孔边缘", "焊接缝", "安装孔", "喷涂外观面", "翻边"],
        ["数控折弯", "激光切割", "焊接工位", "喷涂线", "钣金终检"],
    ),
    "玻璃盖板": (
        ["6.1 寸手机盖板", "手表盖板", "后盖玻璃", "车载屏盖板"],
        ["可视区（AA 区）", "边缘倒角", "摄像头孔", "丝印油墨区", "R 角"],
        ["CNC 精雕", "强化炉后", "丝印工位", "贴合工位", "外观灯检"],
    ),
    "锂电池极片": (
        ["正极片", "负极片"],
        ["涂布区", "极耳", "留白区", "分切边", "辊压面"],
        ["涂布机 2 号线", "辊压工序", "分切工序", "CCD 在线检测", "极片抽检台"],
    ),
    "铸件": (
        ["铝合金壳体", "阀体", "电机端盖", "减速器箱体"],
        ["法兰面", "内腔", "螺纹孔", "浇冒口残留处", "加工面", "薄壁处"],
        ["压铸岛 2 号", "机加工", "X 光探伤", "气密测试", "铸件终检"],
    ),
    "连接器端子": (
        ["Type-C 端子", "板对板连接器", "汽车线束端子"],
        ["端子接触区", "镀层表面", "插针尖端", "塑胶本体", "压接区"],
        ["冲压工序", "电镀线", "组装线", "端子全检机"],
    ),
}

CRITICAL_LOCATIONS = {
    "BGA 区域",
    "电源模块焊盘",
    "可视区（AA 区）",
    "法兰面",
    "分切边",
    "卡扣根部",
    "端子接触区",
    "焊接缝",
    "极耳",
    "内腔",
}

SHIFTS = ["早班", "中班", "夜班", "白班", "晚班"]
INSPECTORS = ["IPQC 巡检", "终检 FQC", "来料检验 IQC", "首件检验", "OQC 出货检验", "客户退货复检"]


# ---------------------------------------------------------------- defect catalogue
# Each defect: synonyms used in descriptions; the product lines it occurs on; a measurement
# function (rng, line, loc) -> (phrase, level 0..3); rework flags for level 1 and 2
# (True -> 返工, else 让步接收 / 报废), with per-line overrides; the rework step; root causes
# as (cause, [hints in the inspector's words], corrective action).


def _fmt_mm(rng, value, unit="mm"):
    style = rng.randrange(5)
    if style == 0:
        return f"约{value:g}{unit}"
    if style == 1:
        return f"{value:g} {unit}"
    if style == 2:
        return f"{value:g}{'毫米' if unit == 'mm' else unit}"
    if style == 3:
        return f"目测{value:g}{unit}左右"
    return f"实测 {value:g}{unit}"


def measure_scratch(rng, line, loc):
    length = round(rng.uniform(0.5, 22), 1)
    felt = rng.random() < 0.35
    feel = (
        rng.choice(["指甲能刮到", "手摸有明显凹感", "指甲可感"])
        if felt
        else rng.choice(["手感不明显", "指甲刮不到", "仅反光下可见"])
    )
    level = 0 if length < 3 and not felt else (1 if length < 10 and not felt else 2)
    if loc in CRITICAL_LOCATIONS and level == 1:
        level = 2
    return f"长度{_fmt_mm(rng, length)}，{feel}", level


def measure_cold_joint(rng, line, loc):
    n = rng.randint(1, 4)
    failed = rng.random() < 0.25
    test = (
        rng.choice(["功能测试不通过", "上电后无输出", "ICT 报开路"])
        if failed
        else rng.choice(["ICT 暂未报错", "功能测试通过", "上电正常"])
    )
    level = 3 if failed else (2 if n >= 2 or loc in CRITICAL_LOCATIONS else 1)
    return f"{n} 个焊点，{test}", level


def measure_bridge(rng, line, loc):
    pins = rng.choice(["相邻两脚", "第 3、4 脚", "两个焊盘之间", "三个引脚"])
    shorted = rng.random() < 0.4
    test = (
        rng.choice(["上电短路", "测试时电源被拉低", "烧了保险丝"])
        if shorted
        else rng.choice(["尚未上电", "万用表测阻值偏低", "外观可见锡桥"])
    )
    return f"{pins}连在一起，{test}", 3 if shorted else 2


DIMENSIONS = {  # feature, nominal mm, +/- tolerance mm (nominal 0: a form tolerance, "<= tol")
    "注塑件": [("卡扣宽度", 3.2, 0.05), ("壁厚", 1.5, 0.05), ("孔径", 2.5, 0.03), ("总长", 120.0, 0.2)],
    "钣金": [("孔距", 42.0, 0.1), ("总长", 320.0, 0.3), ("孔径", 5.0, 0.1), ("折边高度", 12.0, 0.15)],
    "铸件": [("孔径", 8.0, 0.02), ("平面度", 0.0, 0.05), ("壁厚", 3.0, 0.1), ("孔距", 64.0, 0.05)],
    "玻璃盖板": [("长度", 146.7, 0.05), ("厚度", 0.55, 0.02), ("孔径", 6.2, 0.03)],
    "连接器端子": [("料厚", 0.3, 0.01), ("宽度", 1.2, 0.02), ("针长", 5.0, 0.05)],
}


def measure_dimension(rng, line, loc):
    feature, nominal, tol = rng.choice(DIMENSIONS[line])
    ratio = rng.choice([0.1, 0.2, 0.3, 0.6, 1.0, 1.6, 2.4])
    excess = round(tol * (1 + ratio), 3)
    measured = round(nominal + excess if rng.random() < 0.6 else nominal - excess, 3)
    if nominal == 0.0:
        measured = abs(measured)
        spec = f"要求≤{tol:g}mm，实测 {measured:g}mm"
    else:
        spec = rng.choice(
            [
                f"图纸 {nominal:g}±{tol:g}mm，实测 {measured:g}mm",
                f"{nominal:g}±{tol:g}，量得 {measured:g}",
                f"标准 {nominal:g}±{tol:g}mm，测得 {measured:g}mm",
            ]
        )
    return f"{feature}{spec}", 1 if ratio <= 0.3 else 2


def measure_bubble(rng, line, loc):
    diameter = round(rng.choice([0.1, 0.2, 0.3, 0.5, 0.8, 1.2, 2.0, 3.0]), 1)
    count = rng.randint(1, 5)
    level = 0 if diameter < 0.3 and count <= 2 else (1 if diameter < 1.0 else 2)
    return f"直径{_fmt_mm(rng, diameter)}，共 {count} 个", level


def measure_crack(rng, line, loc):
    length = round(rng.uniform(0.3, 12), 1)
    how = rng.choice(["荧光渗透确认", "放大镜下可见", "敲击声音发闷", "灯检可见", "探伤发现"])
    level = 3 if length > 5 or loc in CRITICAL_LOCATIONS else 2
    return f"长{_fmt_mm(rng, length)}，{how}", level


def measure_burr(rng, line, loc):
    if line == "锂电池极片":
        height = rng.choice([4, 6, 8, 10, 12, 15, 20, 25])
        level = 0 if height < 8 else (2 if height <= 12 else 3)
        return f"高度{_fmt_mm(rng, height, 'μm')}（标准≤8μm）", level
    height = rng.choice([0.05, 0.08, 0.12, 0.2, 0.3, 0.5, 0.8])
    level = 0 if height < 0.1 else (1 if height < 0.3 else 2)
    return f"高{_fmt_mm(rng, height)}", level


def measure_stain(rng, line, loc):
    wipes = rng.random() < 0.45
    area = rng.choice([2, 5, 10, 20, 40])
    how = (
        rng.choice(["用酒精能擦掉", "擦拭后消失", "无尘布一擦就掉"])
        if wipes
        else rng.choice(["擦不掉", "酒精擦拭后仍有印迹", "清洁后残留"])
    )
    return f"面积{_fmt_mm(rng, area, 'mm²')}，{how}", 0 if wipes else 1


def measure_short_shot(rng, line, loc):
    if line == "锂电池极片":
        length = rng.choice([3, 8, 15, 30, 60, 120])
        return f"漏涂长度{_fmt_mm(rng, length)}", 3 if length > 50 else 2
    size = round(rng.choice([0.3, 0.5, 1.0, 2.0, 4.0]), 1)
    level = 2 if size >= 1.0 or loc in CRITICAL_LOCATIONS else 1
    return f"缺口约 {size:g}mm，未填满", level


def measure_warp(rng, line, loc):
    flat = rng.choice([0.1, 0.2, 0.3, 0.5, 0.8, 1.2, 2.0])
    level = 0 if flat <= 0.3 else (1 if flat <= 0.8 else 2)
    return f"平面度 {flat:g}mm（要求≤0.3mm）", level


def measure_color(rng, line, loc):
    delta = rng.choice([0.4, 0.8, 1.2, 1.6, 2.3, 3.1, 4.0])
    level = 0 if delta < 1.0 else (1 if delta < 2.0 else 2)
    return rng.choice([f"色差仪测 ΔE={delta:g}", f"ΔE {delta:g}", f"和标准色板比 ΔE 约 {delta:g}"]), level


def measure_rust(rng, line, loc):
    spread = rng.choice(["点状", "零星几点", "成片", "大面积"])
    level = 1 if spread in ("点状", "零星几点") else 2
    if line == "连接器端子" and loc == "端子接触区":
        level = 2
    return f"{spread}分布", level


def measure_foreign(rng, line, loc):
    if line == "锂电池极片":
        size = rng.choice([30, 50, 80, 150])
        return f"金属颗粒约 {size}μm", 3
    size = rng.choice([0.1, 0.15, 0.3, 0.4, 0.6, 1.0])
    level = 0 if size < 0.2 else (1 if size < 0.5 else 2)
    return f"黑点直径{_fmt_mm(rng, size)}", level


def measure_chip(rng, line, loc):
    size = rng.choice([0.05, 0.08, 0.15, 0.25, 0.4, 0.8])
    level = 0 if size < 0.1 else (1 if size < 0.3 else 2)
    return f"崩口{_fmt_mm(rng, size)}", level


def measure_missing(rng, line, loc):
    part = rng.choice(["电阻 R15", "电容 C7", "二极管 D2", "磁珠 FB1", "TVS 管 D5"])
    return f"{part}位置空贴", 2


DEFECTS = {
    "划痕": dict(
        synonyms=["划痕", "划伤", "刮痕", "擦伤", "拉痕"],
        lines=["注塑件", "钣金", "玻璃盖板", "铸件", "连接器端子"],
        measure=measure_scratch,
        rework=(True, True),
        overrides={"玻璃盖板": (True, False)},
        rework_step="抛光修复后复检外观",
        causes=[
            ("周转搬运时摩擦磕碰", ["周转箱里没放隔板", "托盘叠放过高", "搬运时有拖拽"], "周转箱加隔板并规范搬运"),
            ("治具表面残留硬质颗粒", ["治具表面能看到残渣", "夹具两周没清理"], "清理治具并增加每班点检"),
            ("保护膜贴附不全", ["保护膜只贴了一半", "保护膜翘边"], "调整贴膜工位并首件确认"),
        ],
    ),
    "虚焊": dict(
        synonyms=["虚焊", "假焊", "焊点润湿不良", "冷焊", "焊点不饱满"],
        lines=["PCB 组装"],
        measure=measure_cold_joint,
        rework=(True, True),
        overrides={},
        rework_step="补焊后做 X-ray 与功能复测",
        causes=[
            ("回流焊温度曲线偏低", ["炉温曲线峰值只有 228℃", "今天换线后没重新测炉温"], "重新测定并校准炉温曲线"),
            ("锡膏印刷量不足", ["钢网开口有堵塞", "SPI 报锡量偏少"], "清洗钢网并复核 SPI 阈值"),
            ("焊盘或引脚氧化", ["这批物料开封超过 72 小时", "引脚颜色发暗"], "物料按 MSD 规定烘烤并管控开封时间"),
        ],
    ),
    "连锡": dict(
        synonyms=["连锡", "桥连", "锡桥", "短路"],
        lines=["PCB 组装"],
        measure=measure_bridge,
        rework=(True, True),
        overrides={},
        rework_step="用吸锡带去除桥连并电测复检",
        causes=[
            ("锡膏印刷偏移或过量", ["印刷机对位偏了", "SPI 报锡量偏多"], "校正印刷对位并调整刮刀压力"),
            ("钢网开口设计过大", ["细间距器件钢网没做内缩", "钢网是旧版本"], "修改钢网开口并验证首件"),
            ("贴片压力过大导致锡膏塌陷", ["贴片头压力最近调过", "吸嘴有磨损"], "恢复贴片压力参数并更换吸嘴"),
        ],
    ),
    "尺寸超差": dict(
        synonyms=["尺寸超差", "超公差", "尺寸不良", "尺寸偏差超标"],
        lines=["注塑件", "钣金", "铸件", "玻璃盖板", "连接器端子"],
        measure=measure_dimension,
        rework=(False, False),
        overrides={"钣金": (False, True)},
        rework_step="校形后重新全尺寸测量",
        causes=[
            ("模具或刀具磨损", ["模具已经打了 30 万模次", "刀具寿命到了还没换"], "更换刀具或修模并缩短寿命管控周期"),
            ("工艺参数漂移", ["保压时间被改过", "设备参数和工艺卡不一致"], "恢复工艺卡参数并锁定修改权限"),
            ("量具或定位基准偏差", ["卡尺校准标签过期", "定位销松动"], "校准量具并紧固定位基准"),
        ],
    ),
    "气泡": dict(
        synonyms=["气泡", "气孔", "鼓包"],
        lines=["注塑件", "玻璃盖板", "锂电池极片", "铸件"],
        measure=measure_bubble,
        rework=(False, False),
        overrides={"玻璃盖板": (True, False)},
        rework_step="拆解后重新贴合并复检",
        causes=[
            ("原料含水率偏高", ["原料没烘够 4 小时", "除湿机报警过"], "原料按规定烘干并记录含水率"),
            ("排气不良", ["排气槽有堵塞", "模具排气口积垢"], "清理排气槽并增加保养频次"),
            ("浆料或胶水脱泡不充分", ["浆料搅拌后直接上机", "脱泡时间缩短了"], "恢复真空脱泡时间并抽检"),
        ],
    ),
    "裂纹": dict(
        synonyms=["裂纹", "裂痕", "开裂", "裂缝", "隐裂"],
        lines=["玻璃盖板", "铸件", "注塑件", "钣金"],
        measure=measure_crack,
        rework=(False, False),
        overrides={},
        rework_step="",
        causes=[
            ("冷却过快产生内应力", ["出模后直接风冷", "强化炉降温段异常"], "调整冷却曲线并做应力检测"),
            ("折弯或装配受力过大", ["折弯半径比图纸小", "装配时用力敲击"], "按图纸折弯半径加工并规范装配力矩"),
            ("材料内部缺陷", ["来料批次检验记录不全", "断口有夹杂"], "追溯来料批次并加严进料检验"),
        ],
    ),
    "毛刺": dict(
        synonyms=["毛刺", "飞边", "批锋"],
        lines=["注塑件", "钣金", "铸件", "锂电池极片", "连接器端子"],
        measure=measure_burr,
        rework=(True, True),
        overrides={"锂电池极片": (True, False)},
        rework_step="去毛刺修边后复检",
        causes=[
            ("刀口或冲头磨损", ["分切刀已超寿命", "冲头刃口发亮变钝"], "更换刀具并建立刃口寿命台账"),
            ("模具分型面合模不严", ["分型面有压伤", "锁模力偏低"], "修复分型面并调整锁模力"),
            ("刀具间隙设置不当", ["上下刀间隙调大了", "换型后未复核间隙"], "按标准重设刀具间隙并首件确认"),
        ],
    ),
    "污渍": dict(
        synonyms=["污渍", "脏污", "油污", "指纹印", "助焊剂残留"],
        lines=["PCB 组装", "玻璃盖板", "注塑件", "钣金"],
        measure=measure_stain,
        rework=(True, True),
        overrides={},
        rework_step="用无尘布蘸酒精清洁后复检",
        causes=[
            ("作业员未戴手套直接接触", ["操作工没戴指套", "现场有人徒手拿取"], "重申防护要求并加入巡检项"),
            ("设备漏油", ["输送带下方有油滴", "气缸有漏油痕迹"], "维修漏油点并清洁设备"),
            ("清洗工序不充分", ["清洗液浓度偏低", "清洗时间被缩短"], "恢复清洗参数并每班检测清洗液"),
        ],
    ),
    "缺料": dict(
        synonyms=["缺料", "欠注", "缺胶", "漏涂", "填充不足"],
        lines=["注塑件", "铸件", "锂电池极片"],
        measure=measure_short_shot,
        rework=(False, False),
        overrides={},
        rework_step="",
        causes=[
            ("注射压力或速度不足", ["注射压力比工艺卡低 10%", "螺杆止逆环磨损"], "恢复注射参数并检修止逆环"),
            ("料温或模温偏低", ["模温机报警过", "开机第一模就这样"], "开机预热到位后再生产"),
            ("供料或涂布中断", ["涂布机换卷时断料", "浆料管路有气泡"], "优化换卷流程并加装断料报警"),
        ],
    ),
    "变形": dict(
        synonyms=["变形", "翘曲", "翘边", "弯曲"],
        lines=["注塑件", "钣金", "PCB 组装", "锂电池极片"],
        measure=measure_warp,
        rework=(False, False),
        overrides={"钣金": (True, True)},
        rework_step="校平后复测平面度",
        causes=[
            ("冷却不均匀", ["出模后堆叠放置", "冷却水路一侧堵塞"], "疏通冷却水路并改为单层摆放"),
            ("焊接或回流热应力", ["焊接顺序和作业指导书不一致", "回流焊炉温偏高"], "按作业指导书顺序焊接并复核温度"),
            ("存放方式不当", ["板材竖放受压", "极片卷张力过大"], "改善存放方式并控制卷绕张力"),
        ],
    ),
    "色差": dict(
        synonyms=["色差", "颜色不一致", "偏色", "发黄"],
        lines=["注塑件", "钣金", "玻璃盖板"],
        measure=measure_color,
        rework=(False, False),
        overrides={"钣金": (True, True)},
        rework_step="退漆重喷并比色确认",
        causes=[
            ("色粉或油墨批次差异", ["换了新批次色粉", "油墨供应商换了批号"], "每批色粉或油墨先做色板确认"),
            ("烘烤温度或时间异常", ["烘道温度偏高", "烘烤时间延长了"], "校准烘道温度并记录时间"),
            ("混料比例错误", ["回料比例超过 20%", "配料记录缺失"], "按配比称量并双人复核"),
        ],
    ),
    "锈蚀": dict(
        synonyms=["锈蚀", "生锈", "锈斑", "氧化发黑"],
        lines=["钣金", "铸件", "连接器端子"],
        measure=measure_rust,
        rework=(True, True),
        overrides={"连接器端子": (True, False)},
        rework_step="除锈后重新做防锈处理",
        causes=[
            ("防锈处理不到位", ["防锈油没涂匀", "磷化膜偏薄"], "复核防锈工艺并抽检膜厚"),
            ("存放环境湿度高", ["仓库湿度计显示 80%", "货物放在门口淋到雨"], "仓库加除湿并规定存放区域"),
            ("镀层厚度不足", ["镀层测厚只有标准的一半", "电镀线电流偏低"], "调整电镀参数并增加测厚频次"),
        ],
    ),
    "异物": dict(
        synonyms=["异物", "杂质", "黑点", "夹杂"],
        lines=["注塑件", "锂电池极片", "玻璃盖板", "铸件"],
        measure=measure_foreign,
        rework=(False, False),
        overrides={},
        rework_step="",
        causes=[
            ("原料混入杂质", ["料斗盖没盖", "回料里有碎屑"], "料斗加盖并对回料过筛"),
            ("车间洁净度不达标", ["洁净间压差异常", "风淋室门常开"], "恢复洁净间压差并加强门禁"),
            ("设备磨损产生碎屑", ["辊轴表面有磨痕", "分切刀磨损掉屑"], "更换磨损部件并加装除尘"),
        ],
    ),
    "崩边": dict(
        synonyms=["崩边", "崩角", "缺口"],
        lines=["玻璃盖板", "连接器端子"],
        measure=measure_chip,
        rework=(False, False),
        overrides={},
        rework_step="",
        causes=[
            ("磨轮或刀具磨损", ["CNC 磨轮用了很久", "刀具寿命计数已超"], "更换磨轮并按寿命管控"),
            ("搬运磕碰", ["料盒里产品互相碰撞", "周转车推得太快"], "料盒加隔位并规范周转"),
            ("夹持力过大", ["吸盘真空度调高了", "夹爪压力过大"], "调整夹持参数并首件确认"),
        ],
    ),
    "漏件": dict(
        synonyms=["漏件", "漏贴", "缺件", "少件"],
        lines=["PCB 组装"],
        measure=measure_missing,
        rework=(True, True),
        overrides={},
        rework_step="按 BOM 补贴元件后复测",
        causes=[
            ("贴片机飞达供料异常", ["飞达报警被跳过", "料带卡料"], "检修飞达并禁止跳过报警"),
            ("吸嘴堵塞或真空不足", ["吸嘴有锡膏残留", "抛料率突然升高"], "清洁吸嘴并监控抛料率"),
            ("程序坐标或 BOM 错误", ["贴片程序是旧版本", "BOM 变更没同步"], "核对程序与 BOM 版本并受控发布"),
        ],
    ),
}
